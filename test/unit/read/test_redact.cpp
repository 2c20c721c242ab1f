// Issue 28, point 6: redaction by pattern, not by list, with one rule for every output. The shim applies it at capture
// (test_process_identity); here the rule itself, and the readers applying it again to a file or frame whose writer
// did not (an older shim, a foreign writer), so that analyze, dump and the live collector never print a secret.
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
