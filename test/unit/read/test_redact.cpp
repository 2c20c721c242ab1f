// Issue 28, point 6: redaction by pattern, not by list, with one rule for every output. The shim applies it at capture
// (test_process_identity); here the rule itself, and the readers applying it again to a file or frame whose writer
// did not (an older shim, a foreign writer), so that analyze, dump and the live collector never print a secret.
// Issue 45, item 6: redaction by shape, in a table of secret forms (each with the exact text it becomes) and of
// harmless look-alikes that stay as they are; the last words too; and hostile values that must end fast.
#include <chrono>
#include <cstring>

#include "rank_file_fixtures.h"
#include "read/redact.h"
#include "wire_fixtures.h"

using namespace ncw;
using rank_file_fixtures::FileBuilder;

TEST_CASE("secret names by pattern, in any case") {
    for (const char* name : {"NCCL_IB_PASSWD", "NCCL_NET_PWD", "NCCL_PSK", "TORCH_DISTRIBUTED_AUTH", "NCCLWATCH_TOKEN",
                             "MY_API_KEY", "db_password", "AWS_SECRET_ACCESS_KEY", "GOOGLE_APPLICATION_CREDENTIALS",
                             "NCCL_CREDS", "SESSION_COOKIE", "hf_auth", "token", "passwd", "api-key"})
        CHECK(redact::is_secret_name(name));
    for (const char* name : {"NCCL_DEBUG", "MASTER_ADDR", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_IB_HCA",
                             "world_size", "TORCH_DISTRIBUTED_INIT_METHOD", ""})
        CHECK_FALSE(redact::is_secret_name(name));
}

TEST_CASE("the six forms the issue found recorded, sent and printed") {
    // NCCL_NET_PWD=..., NCCL_PSK=...: by the name.
    CHECK(redact::env_value("NCCL_NET_PWD", "pwd-1") == "<redacted>");
    CHECK(redact::env_value("NCCL_PSK", "psk-2") == "<redacted>");
    // ?token=... in an init method.
    CHECK(redact::env_value("TORCH_DISTRIBUTED_INIT_METHOD", "tcp://store:29500?token=tok-3&world_size=4") ==
          "tcp://store:29500?token=<redacted>&world_size=4");
    // A scheme-less user:password@host.
    CHECK(redact::value("admin:secret-4@etcd:2379") == "admin:<redacted>@etcd:2379");
    // ;password=... in an option list, ?passwd=... in a query string.
    CHECK(redact::value("host=db;user=me;password=pw-5;port=5432") == "host=db;user=me;password=<redacted>;port=5432");
    CHECK(redact::value("https://h/x?passwd=pw-6") == "https://h/x?passwd=<redacted>");
}

TEST_CASE("credentials inside values: URLs with and without a scheme, keys in lists") {
    CHECK(redact::value("https://alice:s3cret@example.com/x") == "https://alice:<redacted>@example.com/x");
    CHECK(redact::value("tcp://u:p@h1:1,tcp://v:q@h2:2") == "tcp://u:<redacted>@h1:1,tcp://v:<redacted>@h2:2");
    CHECK(redact::value("redis://:onlypass@cache:6379") == "redis://:<redacted>@cache:6379");
    CHECK(redact::value("u:p@ss@host:1") == "u:<redacted>@host:1");  // the user information ends at its last '@'
    CHECK(redact::value("--store=admin:pw@etcd:2379 --x") == "--store=admin:<redacted>@etcd:2379 --x");
    CHECK(redact::value("--api-key=abc --n=2") == "--api-key=<redacted> --n=2");
    CHECK(redact::value("auth_token: abc, mode: x") == "auth_token: <redacted>, mode: x");
    // Kept: no user information, no password, no secret key, nothing at all.
    for (const char* kept : {"http://example.com:8080/a@b", "env://user@host", "no url here", "x://", "", "a=1&b=2",
                             "node0:29500", "mlx5_0:1,mlx5_1:1", "key=", "user@example.com"})
        CHECK(redact::value(kept) == kept);
}

TEST_CASE("the rule is idempotent: a value redacted at capture reads back the same") {
    for (const char* v : {"tcp://bob:pw@store:1", "a?token=x&b=1", "admin:s@etcd:2379", "password=p;x=1"}) {
        const std::string once = redact::value(v);
        CHECK(once != v);
        CHECK(redact::value(once) == once);
    }
    CHECK(redact::env_entry("NCCL_IB_PASSWD=<redacted>") == "NCCL_IB_PASSWD=<redacted>");
    CHECK(redact::env_entry("NCCL_IB_PASSWD=hunter2") == "NCCL_IB_PASSWD=<redacted>");
    CHECK(redact::env_entry("ncclwatch.no_effect=NCCL_NET_PWD,NCCL_PSK") ==
          "ncclwatch.no_effect=NCCL_NET_PWD,NCCL_PSK");
    CHECK(redact::env_entry("no equals sign") == "no equals sign");
}

TEST_CASE("a rank file written without redaction reads back redacted", "[rank_file][env]") {
    TempDir dir;
    FileBuilder b;
    b.standard(4);
    b.add_env_region({"NCCL_DEBUG=INFO", "NCCL_PSK=psk-raw", "MASTER_ADDR=admin:pw-raw@node0",
                      "TORCH_DISTRIBUTED_INIT_METHOD=env://?token=tok-raw"});
    const auto path = dir.file("r.ncw");
    b.write(path);
    RankFile f;
    REQUIRE(f.open(path));
    const std::vector<std::string> want = {"NCCL_DEBUG=INFO", "NCCL_PSK=<redacted>",
                                           "MASTER_ADDR=admin:<redacted>@node0",
                                           "TORCH_DISTRIBUTED_INIT_METHOD=env://?token=<redacted>"};
    CHECK(f.header().env == want);
}

TEST_CASE("a Hello whose sender did not redact decodes redacted") {
    wire::Hello in = wire_fixtures::sample_hello();
    in.header.env = {"NCCL_NET_PWD=pwd-raw", "NCCL_DEBUG=WARN"};
    std::vector<uint8_t> frame;
    wire::encode(in, frame);
    std::vector<uint8_t> payload;
    wire_fixtures::split(frame, payload);
    wire::Hello out;
    std::string err;
    REQUIRE(wire::decode(payload.data(), payload.size(), out, &err));
    CHECK(out.header.env == std::vector<std::string>{"NCCL_NET_PWD=<redacted>", "NCCL_DEBUG=WARN"});
}

namespace {

struct Form {
    const char* in;
    const char* out;
};

// Issue 45, item 6: each secret form, as a value may carry it, and the exact text it becomes: the secret gone,
// "<redacted>" in its place, the rest intact.
const Form kSecretForms[] = {
    // Authorization headers: the scheme kept, the credential gone (in a header line, a curl -H, JSON).
    {"Authorization: Bearer abc.def-ghi_123", "Authorization: Bearer <redacted>"},
    {"curl -H 'Authorization: Basic dXNlcjpwYXNz' https://api",
     "curl -H 'Authorization: Basic <redacted>' https://api"},
    {"authorization: token 0123abcd, x", "authorization: token <redacted>, x"},
    {"{\"Authorization\": \"Bearer tok-1\"}", "{\"Authorization\": \"Bearer <redacted>\"}"},
    {"Proxy-Authorization: Digest username=\"u\", response=\"6629fae4\"\nnext",
     "Proxy-Authorization: Digest <redacted>\nnext"},
    {"Authorization: AWS4-HMAC-SHA256 Credential=AKIA/x, Signature=fe5f", "Authorization: AWS4-HMAC-SHA256 <redacted>"},
    // Bearer and Basic credentials anywhere.
    {"sent Bearer ya29.a0AfH6SMBx to it", "sent Bearer <redacted> to it"},
    {"headers Basic YWxpY2U6czNjcmV0 sent", "headers Basic <redacted> sent"},
    // URL user information: the whole password, a '/' in it too.
    {"s3://AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY@bucket/path",
     "s3://AKIAIOSFODNN7EXAMPLE:<redacted>@bucket/path"},
    {"https://user:p/a/ss@host:443/x@y", "https://user:<redacted>@host:443/x@y"},
    {"https://alice:s3cret@example.com/x", "https://alice:<redacted>@example.com/x"},
    {"redis://:onlypass@cache:6379", "redis://:<redacted>@cache:6379"},
    {"admin:secret-4@etcd:2379", "admin:<redacted>@etcd:2379"},
    // key:value with no blank, key = value, quoted values and keys.
    {"password:hunter2", "password:<redacted>"},
    {"db_password:hunter2,port:5432", "db_password:<redacted>,port:5432"},
    {"api-key:abc123", "api-key:<redacted>"},
    {"password = hunter2 rest", "password = <redacted> rest"},
    {"password=\"two words\" x=1", "password=\"<redacted>\" x=1"},
    {"{\"token\":\"abc123\",\"n\":2}", "{\"token\":\"<redacted>\",\"n\":2}"},
    {"{\"type\": \"service_account\", \"private_key\": \"-----BEGIN PRIVATE KEY-----\\nMIIEv\\n-----END PRIVATE "
     "KEY-----\\n\", \"client_email\": \"sa@p.iam\"}",
     "{\"type\": \"service_account\", \"private_key\": \"<redacted>\", \"client_email\": \"sa@p.iam\"}"},
    {"client_secret=abc123XYZ&grant_type=client_credentials", "client_secret=<redacted>&grant_type=client_credentials"},
    // Signed URLs and connection strings: Azure SAS, AWS SigV4 and V2, Azure AccountKey.
    {"https://acct.blob.core.windows.net/c/b.bin?sv=2021-08-06&ss=b&sig=abc%2Fdef%3D",
     "https://acct.blob.core.windows.net/c/b.bin?sv=2021-08-06&ss=b&sig=<redacted>"},
    {"https://b.s3.amazonaws.com/k?X-Amz-Signature=fe5f80f77d&X-Amz-Date=20240101T000000Z",
     "https://b.s3.amazonaws.com/k?X-Amz-Signature=<redacted>&X-Amz-Date=20240101T000000Z"},
    {"?X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20240101%2Fus-east-1&X-Amz-Expires=60",
     "?X-Amz-Credential=<redacted>&X-Amz-Expires=60"},
    {"&X-Amz-Security-Token=IQoJb3JpZ2lu&y=1", "&X-Amz-Security-Token=<redacted>&y=1"},
    {"?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Signature=abc%2B&Expires=1700000000",
     "?AWSAccessKeyId=<redacted>&Signature=<redacted>&Expires=1700000000"},
    {"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=abc+def/ghi==;EndpointSuffix=core.windows.net",
     "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=<redacted>;EndpointSuffix=core.windows.net"},
    {"SharedAccessSignature=sv=2021&sig=abc", "SharedAccessSignature=<redacted>&sig=<redacted>"},
    {"tcp://store:29500?token=tok-3&world_size=4", "tcp://store:29500?token=<redacted>&world_size=4"},
    // JSON Web Tokens: by a key's name, and bare.
    {"NCCL_JWT=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.dBjftJeZ4CVP", "NCCL_JWT=<redacted>"},
    {"jwt=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.dBjftJeZ4CVP;x=1", "jwt=<redacted>;x=1"},
    {"using eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.dBjftJeZ4CVP now", "using <redacted> now"},
    // Options whose next argument is the secret, on a command line or in a Python list.
    {"--password hunter2 --verbose", "--password <redacted> --verbose"},
    {"['train.py', '--hf-token', 'hf_x', '--lr', '1e-4']", "['train.py', '--hf-token', '<redacted>', '--lr', '1e-4']"},
    {"openssl enc -pass pass:hunter2 -in f", "openssl enc -pass <redacted> -in f"},
    // Tokens by their published prefixes (the prefix kept), bare or under a name.
    {"GITHUB_TOKEN=ghp_0123456789abcdefghijABCDEFGHIJ012345", "GITHUB_TOKEN=<redacted>"},
    {"cloning with ghp_0123456789abcdefghijABCDEFGHIJ012345 now", "cloning with ghp_<redacted> now"},
    {"login hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567", "login hf_<redacted>"},
    {"github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ", "github_pat_<redacted>"},
    {"glpat-abcdefghij0123456789 x", "glpat-<redacted> x"},
    {"xoxb-1234567890-abcdefghij", "xoxb-<redacted>"},
    {"AIzaSyA-abcdefghijklmnopqrstuvwxyz01234", "AIza<redacted>"},
    {"sk-proj-abcDEF0123456789abcdefGHIJKLmnop", "sk-<redacted>"},
    // An AWS access key id (kept: an identifier) and the secret key paired with it.
    {"AKIAIOSFODNN7EXAMPLE wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "AKIAIOSFODNN7EXAMPLE <redacted>"},
    {"AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "AKIAIOSFODNN7EXAMPLE:<redacted>"},
    // A PEM private key's body.
    {"-----BEGIN RSA PRIVATE KEY-----MIIEpAIBAAKCAQEA-----END RSA PRIVATE KEY-----",
     "-----BEGIN RSA PRIVATE KEY-----<redacted>-----END RSA PRIVATE KEY-----"},
    // Command lines that carry a password in their own way.
    {"sshpass -p hunter2 ssh node1", "sshpass -p <redacted> ssh node1"},
    {"mysql -u root -phunter2 db", "mysql -u root -p<redacted> db"},
    {"['/usr/bin/mysqldump', '-phunter2', 'db']", "['/usr/bin/mysqldump', '-p<redacted>', 'db']"},
    {"curl -u alice:s3cret https://api", "curl -u alice:<redacted> https://api"},
    {"curl --user=alice:s3cret https://api", "curl --user=alice:<redacted> https://api"},
    {"bash -c 'mysql -phunter2 db'", "bash -c 'mysql -p<redacted> db'"},
    {"docker login -u bob -p hunter2 registry.io", "docker login -u bob -p <redacted> registry.io"},
    // A token as a URL's password: the host stays.
    {"pip install --index-url https://__token__:pypi-AgEIcHlwaS5vcmc0123456789abcdefghijklmnopqrstuvwxyzABCDEF@"
     "upload.pypi.org/simple x",
     "pip install --index-url https://__token__:<redacted>@upload.pypi.org/simple x"},
    {"git clone https://oauth2:glpat-abcdefghij0123456789@gitlab.com/x/y.git",
     "git clone https://oauth2:<redacted>@gitlab.com/x/y.git"},
};

// Harmless values that look like secrets: kept as they are.
const char* const kLookAlikes[] = {
    "NCCL_SOCKET_IFNAME=eth0",
    "MASTER_ADDR=10.0.0.1",
    "/data/key_frames/x.pt",
    "--data /data/keys/tokens/secret_santa.pt",
    "path=/data/key_frames/x.pt",
    "--max-tokens 4096",
    "max_tokens:4096",
    "--tokenizer gpt2",
    "tokenizer:gpt2",
    "monkey-host:29500",
    "compass:north",
    "--no-password --x 1",
    "--use-auth-token --fp16",
    "--key-file /etc/ssl/a.pem",
    "http://example.com:8080/a@b",
    "http://[::1]:8080/x@y",
    "jdbc:mysql://db:3306/x?user=a@b",
    "git@github.com:org/repo.git",
    "env://user@host",
    "user@example.com",
    "Basic checks passed",
    "basic auth is off",
    "the bearer token is set",
    "a Bearer Token header",
    "Authorization header missing",
    "ssh -p 22 node1",
    "python -u train.py",
    "docker run -p 8080:80 img",
    "docker run -p8080:80 img",
    "mysql -p db",
    "sshpass -f /run/pw ssh node1",
    "curl -u alice https://api",
    "curl -H 'Accept: application/json' https://api",
    "ncw::redact::value",
    "sk-learn",
    "HF_HOME=/x/hf_cache",
    "hf_transfer=1",
    "NCCL_IB_HCA=mlx5_0:1,mlx5_1:1",
    "12:30:45",
    "AKIAIOSFODNN7EXAMPLE",
    "eyJhbGciOiJIUzI1NiJ9",
    "signal=15",
    "signatures: 3",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING=1",
    "a == b",
    "RuntimeError: CUDA out of memory. Tried to allocate 32.00 TiB (py_stall.py:88)",
    "KeyError: 'learning_rate' (train.py:12)",
    "keys = 3, tokens = 4096",
    "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>",
};

}  // namespace

TEST_CASE("issue 45: every secret form becomes its exact redacted text, and reads back the same") {
    CHECK(std::size(kSecretForms) >= 30);
    for (const Form& f : kSecretForms) {
        INFO(f.in);
        CHECK(redact::value(f.in) == f.out);
        CHECK(redact::value(f.out) == f.out);  // idempotent: a value redacted at capture reads back the same
    }
}

TEST_CASE("issue 45: harmless look-alikes stay as they are") {
    for (const char* kept : kLookAlikes) {
        INFO(kept);
        CHECK(redact::value(kept) == kept);
    }
}

TEST_CASE("issue 45: the names that say secret by a word: SIG, SIGNATURE, JWT") {
    for (const char* name : {"sig", "X-Amz-Signature", "SharedAccessSignature", "NCCL_JWT", "jwt", "X-Amz-Credential",
                             "X-Amz-Security-Token", "GITHUB_TOKEN", "client_secret", "private_key", "AccountKey"})
        CHECK(redact::is_secret_name(name));
    for (const char* name : {"NCCL_SOCKET_IFNAME", "signal", "signatures", "NCCL_SIGNAL", "design", "assign"})
        CHECK_FALSE(redact::is_secret_name(name));
    CHECK(redact::env_entry("NCCL_JWT=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig") == "NCCL_JWT=<redacted>");
    CHECK(redact::env_entry("NCCL_SOCKET_IFNAME=eth0") == "NCCL_SOCKET_IFNAME=eth0");
}

TEST_CASE("issue 45: hostile values end fast, whole, without a crash") {
    // Each repeated to 256 KiB: long values, no terminators, many '@' and ':', each detector's start over and over.
    // By detector: user information; keys; options and command lines; shapes; PEM keys and what redaction leaves.
    const std::vector<std::vector<const char*>> groups = {
        {"a", "@", ":", "@:", ":@", "://", "a:b@", "s://a:b/", "/@", "https://a:b/c@"},
        {"=", "a=", "password=", "password:", "\"", "'", "\"k\":", "Authorization: ", "'Authorization: Digest "},
        {"-", "--password ", "sshpass ", "mysql -p", "curl -u a:", "\\"},
        {"Bearer ", "Basic ", "bearer a ", "eyJ", "eyJa.", "ghp_", "sk-", "sk-a", "AKIA", "AKIAAAAAAAAAAAAAAAAA/"},
        {"-----BEGIN ", "-----BEGIN PRIVATE KEY-----", "<redacted>"},
    };
    const size_t n = size_t(1) << 18;
    std::vector<std::string> hostile;
    std::vector<const char*> units;
    for (const auto& g : groups) units.insert(units.end(), g.begin(), g.end());
    for (const char* unit : units) {
        std::string v;
        while (v.size() < n) v += unit;
        hostile.push_back(std::move(v));
    }
    hostile.push_back(std::string(n, '\0'));
    std::string bytes(n, ' ');
    for (size_t i = 0; i < n; ++i) bytes[i] = char((i * 2654435761u) >> 13);
    hostile.push_back(bytes);
    for (const std::string& v : hostile) {
        INFO(v.substr(0, 24));
        const auto t0 = std::chrono::steady_clock::now();
        const std::string out = redact::value(v);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        CHECK(s < 2.0);  // linear: milliseconds; a quadratic scan of this size takes minutes
        CHECK(out.size() <= v.size() * (redact::kRedacted.size() + 1));
        CHECK(redact::value(out) == out);
    }
}

TEST_CASE("issue 45: the last words of a rank file and of a live frame read back redacted") {
    TempDir dir;
    FileBuilder b;
    b.standard(4);
    const char* words = "HTTPError: 403 for url: https://a.blob.core.windows.net/c/x?sv=2021&sig=raw-sig (t.py:9)";
    std::strcpy(b.hdr().last_words, words);
    b.hdr().last_words_mono_ns = 1050'000000000ull;
    b.hdr().last_words_main = 1;
    const auto path = dir.file("r.ncw");
    b.write(path);
    RankFile f;
    REQUIRE(f.open(path));
    const std::string want =
        "HTTPError: 403 for url: https://a.blob.core.windows.net/c/x?sv=2021&sig=<redacted> (t.py:9)";
    CHECK(f.header().last_words == want);

    wire::State st;
    st.live.last_words = words;
    st.live.last_words_mono_ns = 5;
    std::vector<uint8_t> frame, payload;
    wire::encode(st, frame);
    wire_fixtures::split(frame, payload);
    wire::State back;
    std::string err;
    REQUIRE(wire::decode(payload.data(), payload.size(), back, &err));
    CHECK(back.live.last_words == want);
}
