// Redaction by shape (redact.h): each detector below finds, on the value as given, the spans that hold a credential;
// the spans are merged and each becomes "<redacted>" once. Every detector is one pass over the text (a scan that
// matched moves the pass past what it read, one that did not moves by a character), so the whole is linear in the
// value's size, whatever it holds: it runs over log lines and environment values, never per NCCL call.
#include "read/redact.h"

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

namespace ncw::redact {
namespace {

using Spans = std::vector<std::pair<size_t, size_t>>;  // [from, to) of the value, to be replaced

constexpr size_t npos = std::string_view::npos;

bool is_upper(char c) { return c >= 'A' && c <= 'Z'; }
bool is_lower(char c) { return c >= 'a' && c <= 'z'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alnum(char c) { return is_upper(c) || is_lower(c) || is_digit(c); }
bool is_blank(char c) { return c == ' ' || c == '\t'; }
bool is_quote(char c) { return c == '"' || c == '\''; }
bool is_key_char(char c) { return is_alnum(c) || c == '_' || c == '.' || c == '-'; }
char to_upper(char c) { return is_lower(c) ? char(c - 'a' + 'A') : c; }
bool in(char c, std::string_view set) { return set.find(c) != npos; }
// A token68 credential (RFC 7235: Bearer, Basic), and base64url (a JWT's parts, tokens).
bool is_token68(char c) { return is_alnum(c) || in(c, "-._~+/"); }
bool is_b64url(char c) { return is_alnum(c) || c == '-' || c == '_'; }

// `word` (upper case) at s[at], in any case.
bool word_at(std::string_view s, size_t at, std::string_view word) {
    if (at + word.size() > s.size()) return false;
    for (size_t i = 0; i < word.size(); ++i)
        if (to_upper(s[at + i]) != word[i]) return false;
    return true;
}

// `a` is `word` (upper case), in any case.
bool same_word(std::string_view a, std::string_view word) { return a.size() == word.size() && word_at(a, 0, word); }

bool starts_redacted(std::string_view s, size_t at) { return s.substr(at, kRedacted.size()) == kRedacted; }

size_t find_in(std::string_view s, std::string_view set, size_t from, size_t to) {
    for (size_t i = from; i < to; ++i)
        if (in(s[i], set)) return i;
    return npos;
}

size_t rfind_in(std::string_view s, char c, size_t from, size_t to) {
    for (size_t i = to; i > from; --i)
        if (s[i - 1] == c) return i - 1;
    return npos;
}

size_t run_end(std::string_view s, size_t from, bool (*is_part)(char)) {
    while (from < s.size() && is_part(s[from])) ++from;
    return from;
}

void add(Spans& out, size_t from, size_t to) {
    if (from < to) out.emplace_back(from, to);
}

// The words of a name: split at anything not a letter or a digit, and where a lower-case letter meets an upper-case
// one (AccountKey, apiKey), each in upper case.
template <class Fn>
void each_word(std::string_view name, Fn&& fn) {
    std::string word;
    for (size_t i = 0; i <= name.size(); ++i) {
        const bool end =
            i == name.size() || !is_alnum(name[i]) || (i > 0 && is_lower(name[i - 1]) && is_upper(name[i]));
        if (end && !word.empty()) fn(std::string_view(word)), word.clear();
        if (i < name.size() && is_alnum(name[i])) word += to_upper(name[i]);
    }
}

bool ends_with(std::string_view s, std::string_view tail) {
    return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// A word that says signature: SIG, SIGNATURE (X-Amz-Signature, SharedAccessSignature), not SIGNAL or SIGNATURES.
bool is_signature_word(std::string_view w) { return w == "SIG" || ends_with(w, "SIGNATURE"); }

// The narrower test of a key whose value is not bound to it by '=' or ": " (password:X, --password X): its last
// word names a secret. MAX_TOKENS, TOKENIZER, KEY_FRAMES, MONKEY-HOST, --no-password are not secret keys here.
bool is_secret_last_word(std::string_view name) {
    if (name.substr(0, 3) == "no-" || name.substr(0, 3) == "no_") return false;  // a switch that turns one off
    std::string last;
    each_word(name, [&](std::string_view w) { last = w; });
    for (std::string_view tail :
         {"PASSWORD", "PASSWD", "PASSPHRASE", "SECRET", "TOKEN", "CREDENTIAL", "CREDENTIALS", "COOKIE", "JWT"})
        if (ends_with(last, tail)) return true;
    for (std::string_view word :
         {"PASS", "PWD", "PSK", "KEY", "APIKEY", "ACCESSKEY", "SECRETKEY", "PRIVATEKEY", "ACCOUNTKEY", "AUTH", "CREDS"})
        if (last == word) return true;
    return is_signature_word(last);
}

// KeyError, TokenError, AuthenticationException, UserWarning: the type of an exception or a warning, before its text.
bool names_exception(std::string_view name) {
    std::string last;
    each_word(name, [&](std::string_view w) { last = w; });
    return last == "ERROR" || last == "EXCEPTION" || last == "WARNING";
}

// ---- key=value, key: value, "key": "value", password:X, Authorization: Bearer X ----

// Where an unquoted value ends in a query string, an option list or a line.
constexpr std::string_view kValueEnd = "&;, \t\r\n\"'";

// The value of an Authorization header, from its scheme (kept) on: Bearer, Basic and Token carry one token68, any
// other scheme (Digest, AWS4-HMAC-SHA256, SharedKey) its parameters to the header's end: `limit` (a quoted value's
// closing quote), else the line's end or the quote the header stands in (curl -H 'Authorization: ...').
// npos when the value does not start with a scheme and a blank.
size_t auth_value(std::string_view s, size_t from, size_t limit, char enclosing, Spans& out) {
    const size_t scheme_end = run_end(s, from, [](char c) { return is_alnum(c) || c == '-'; });
    if (scheme_end == from || scheme_end >= std::min(limit, s.size()) || !is_blank(s[scheme_end])) return npos;
    size_t cred = scheme_end;
    while (cred < s.size() && is_blank(s[cred])) ++cred;
    if (starts_redacted(s, cred)) return cred + kRedacted.size();
    const std::string_view scheme = s.substr(from, scheme_end - from);
    if (same_word(scheme, "BEARER") || same_word(scheme, "BASIC") || same_word(scheme, "TOKEN")) {
        size_t end = run_end(s, cred, is_token68);  // never past a quote or a line's end
        while (end < s.size() && s[end] == '=') ++end;
        add(out, cred, end);
        return end;
    }
    if (limit == npos) {
        std::string ends = "\r\n";
        if (enclosing) ends += enclosing;
        limit = find_in(s, ends, cred, s.size());
        if (limit == npos) limit = s.size();
    }
    size_t end = std::max(cred, limit);
    while (end > cred && is_blank(s[end - 1])) --end;
    add(out, cred, end);
    return std::max(cred, limit);
}

// The value of a secret key from `from` (`enclosing`: the quote the key stands in, if any); returns where it ends.
size_t key_value(std::string_view s, size_t from, bool auth_header, char enclosing, Spans& out) {
    if (from >= s.size()) return from;
    if (starts_redacted(s, from)) return from + kRedacted.size();
    if (is_quote(s[from])) {  // "..." or '...': all of it, to the closing quote (a backslash escapes one)
        size_t to = from + 1;
        while (to < s.size() && s[to] != s[from] && s[to] != '\n' && s[to] != '\r') to += s[to] == '\\' ? 2 : 1;
        to = std::min(to, s.size());
        if (!auth_header || auth_value(s, from + 1, to, '\0', out) == npos) add(out, from + 1, to);
        return to;
    }
    if (auth_header)
        if (const size_t end = auth_value(s, from, npos, enclosing, out); end != npos) return end;
    size_t to = s.find_first_of(kValueEnd, from);
    if (to == npos) to = s.size();
    add(out, from, to);
    return to;
}

void secret_keys(std::string_view s, Spans& out) {
    for (size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (c != '=' && c != ':') continue;
        const char next = i + 1 < s.size() ? s[i + 1] : '\0';
        if (c == ':' && (next == ':' || s.substr(i + 1, 2) == "//")) continue;       // ns::name, scheme://
        if (c == '=' && (next == '=' || (i > 0 && in(s[i - 1], "=!<>")))) continue;  // a comparison
        // The key: key characters right before the sign, or in quotes ("password": ...); an assignment may have
        // blanks before its '=' (password = x).
        size_t e = i;
        if (c == '=')
            while (e > 0 && is_blank(s[e - 1])) --e;
        const char quote = e > 0 && is_quote(s[e - 1]) ? s[e - 1] : '\0';
        if (quote) --e;
        size_t k = e;
        while (k > 0 && is_key_char(s[k - 1])) --k;
        if (k == e || (quote && (k == 0 || s[k - 1] != quote))) continue;
        if (c == ':' && k >= 3 && s.substr(k - 3, 3) == "://") continue;  // scheme://__token__:X@host: userinfo()'s
        const std::string_view key = s.substr(k, e - k);
        size_t from = i + 1;
        const bool spaced = from < s.size() && is_blank(s[from]);
        while (from < s.size() && is_blank(s[from])) ++from;
        // password:X (no blank, no quotes) reads like host:port, and "keys = 3" like prose: there, only a key whose
        // last word names a secret. An exception's type is no key ("KeyError: 'x'", an exception's text).
        const bool bound = quote || (c == '=' && e == i) || (c == ':' && spaced);
        const bool secret = bound ? is_secret_name(key) : is_secret_last_word(key);
        if (!secret || names_exception(key)) continue;
        std::string upper;
        for (char ch : key) upper += to_upper(ch);
        const char enclosing = !quote && k > 0 && is_quote(s[k - 1]) ? s[k - 1] : '\0';
        i = std::max(i, key_value(s, from, ends_with(upper, "AUTHORIZATION"), enclosing, out) - 1);
    }
}

// ---- --password X: an option whose next argument is the secret ----

// What may stand right before an option: the start, a blank, a quote, a list's opening or comma.
bool is_arg_edge(char c) { return is_blank(c) || is_quote(c) || in(c, "\r\n[(,"); }

// Where the argument after an option that ends at `e` starts: after blanks (--password X), or after a quoted list's
// separator (['--password', 'X'], "--password" "X"). npos when none follows.
size_t next_argument(std::string_view s, size_t e) {
    if (e >= s.size()) return npos;
    size_t v = e;
    if (is_quote(s[v])) {
        ++v;
        if (v < s.size() && s[v] == ',') ++v;
        const size_t blanks = v;
        while (v < s.size() && is_blank(s[v])) ++v;
        if (v >= s.size() || !is_quote(s[v]) || (v == blanks && s[v - 1] != ',')) return npos;
        return v + 1;
    }
    if (!is_blank(s[v])) return npos;
    while (v < s.size() && is_blank(s[v])) ++v;
    return v;
}

void secret_options(std::string_view s, Spans& out) {
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '-' || (i > 0 && !is_arg_edge(s[i - 1]))) continue;
        const size_t n = run_end(s, i, [](char c) { return c == '-'; });
        const size_t e = run_end(s, n, [](char c) { return is_alnum(c) || c == '-' || c == '_'; });
        const size_t skip = std::max(i, e > 0 ? e - 1 : 0);
        if (n - i > 2 || e - n < 2 || !is_secret_last_word(s.substr(n, e - n))) {
            i = skip;
            continue;
        }
        const size_t v = next_argument(s, e);
        if (v == npos || v >= s.size() || s[v] == '-' || starts_redacted(s, v)) {
            i = skip;
            continue;
        }
        size_t to = s.find_first_of(kValueEnd, v);
        if (to == npos) to = s.size();
        add(out, v, to);
        i = std::max(i, to > 0 ? to - 1 : 0);
    }
}

// ---- Bearer X, Basic X anywhere ----

// A Basic credential: base64 of printable "user:password". "Basic checks" is not one.
bool is_basic_credential(std::string_view c) {
    while (!c.empty() && c.back() == '=') c.remove_suffix(1);
    if (c.size() < 4 || c.size() % 4 == 1) return false;
    uint32_t bits = 0;
    int nbits = 0;
    bool colon = false;
    for (char ch : c) {
        int v = is_upper(ch) ? ch - 'A' : is_lower(ch) ? ch - 'a' + 26 : is_digit(ch) ? ch - '0' + 52 : -1;
        if (ch == '+' || ch == '-') v = 62;
        if (ch == '/' || ch == '_') v = 63;
        if (v < 0) return false;
        bits = (bits << 6) | uint32_t(v);
        nbits += 6;
        if (nbits >= 8) {
            nbits -= 8;
            const unsigned char byte = (bits >> nbits) & 0xff;
            if (byte < 0x20 || byte == 0x7f) return false;
            colon = colon || byte == ':';
        }
    }
    return colon;
}

// A Bearer credential: anything but a word of prose ("bearer token", "Bearer Scheme").
bool is_bearer_credential(std::string_view c) {
    if (c.size() >= 16) return true;
    for (size_t i = 0; i < c.size(); ++i)
        if (!(is_lower(c[i]) || (i == 0 && is_upper(c[i])))) return true;
    return false;
}

void auth_schemes(std::string_view s, Spans& out) {
    for (size_t i = 0; i < s.size(); ++i) {
        if (i > 0 && (is_key_char(s[i - 1]))) continue;  // not a word's start
        const bool bearer = word_at(s, i, "BEARER");
        if (!bearer && !word_at(s, i, "BASIC")) continue;
        size_t j = i + (bearer ? 6 : 5);
        if (j >= s.size() || !is_blank(s[j])) continue;
        while (j < s.size() && is_blank(s[j])) ++j;
        size_t end = run_end(s, j, is_token68);
        while (end < s.size() && s[end] == '=') ++end;
        const std::string_view cred = s.substr(j, end - j);
        if (cred.empty() || !(bearer ? is_bearer_credential(cred) : is_basic_credential(cred))) continue;
        add(out, j, end);
        i = end - 1;
    }
}

// ---- user:password@host ----

// What ends a URL in text: a blank, a quote, an angle bracket (of "<redacted>" too), a list's separator.
constexpr std::string_view kUrlEnd = " \t\r\n\"'<>`{}|\\,;";
// What bounds a scheme-less user:password@host on the left: a token of a list, a path, an assignment, a quote.
constexpr std::string_view kTokenEdge = " \t\r\n,;/?&=\"'<>()[]{}|";

// The user information of the URL whose authority starts at `a` and which ends by `e`.
void url_userinfo(std::string_view s, size_t a, size_t e, Spans& out) {
    if (a >= e || s[a] == '[') return;  // an IPv6 host, no user information
    size_t sep = find_in(s, "/?#", a, e);
    if (sep == npos) sep = e;
    if (const size_t at = rfind_in(s, '@', a, sep); at != npos) {  // scheme://user:password@host: to its last '@'
        const size_t colon = find_in(s, ":", a, at);
        if (colon != npos) add(out, colon + 1, at);
        return;
    }
    // scheme://user:pass/word@host: a password with a '/' (an S3 secret key), not host:port/path@x.
    if (sep == e || s[sep] != '/') return;
    const size_t colon = find_in(s, ":", a, sep);
    if (colon == npos || colon + 1 == sep) return;
    if (std::all_of(s.begin() + colon + 1, s.begin() + sep, is_digit)) return;  // a port
    const size_t at1 = find_in(s, "@?#", sep, e);
    if (at1 == npos || s[at1] != '@') return;  // none, or in the query
    size_t host_end = find_in(s, "/?#", at1, e);
    if (host_end == npos) host_end = e;
    add(out, colon + 1, rfind_in(s, '@', at1, host_end));
}

void userinfo(std::string_view s, Spans& out) {
    // With a scheme: each "://" to the URL's end or the next "://" (a URL in a URL's query starts its own).
    for (size_t p = s.find("://"); p != npos;) {
        const size_t a = p + 3;
        const size_t next = s.find("://", a);
        size_t e = find_in(s, kUrlEnd, a, next == npos ? s.size() : next);
        if (e == npos) e = next == npos ? s.size() : next;
        url_userinfo(s, a, e, out);
        p = next;
    }
    // Without: user:password@host as a token, from the token's first ':' to its last '@'.
    for (size_t start = 0; start < s.size();) {
        size_t end = find_in(s, kTokenEdge, start, s.size());
        if (end == npos) end = s.size();
        const size_t at = rfind_in(s, '@', start, end);
        const size_t colon = at == npos ? npos : find_in(s, ":", start, at);
        if (colon != npos) add(out, colon + 1, at);
        start = end + 1;
    }
}

// ---- credentials known by their shape ----

// eyJ...\.eyJ...\.signature: a JSON Web Token (and a JWE's further parts), whole.
void jwts(std::string_view s, Spans& out) {
    for (size_t i = s.find("eyJ"); i != npos; i = s.find("eyJ", i + 1)) {
        if (i > 0 && (is_b64url(s[i - 1]) || s[i - 1] == '.')) continue;
        size_t end = run_end(s, i, is_b64url);
        if (end >= s.size() || s[end] != '.' || s.substr(end + 1, 3) != "eyJ") continue;
        end = run_end(s, end + 1, is_b64url);
        if (end >= s.size() || s[end] != '.') continue;
        end = run_end(s, end + 1, is_b64url);
        for (int part = 3; part < 5 && end + 1 < s.size() && s[end] == '.' && is_b64url(s[end + 1]); ++part)
            end = run_end(s, end + 1, is_b64url);
        add(out, i, end);
        i = end - 1;
    }
}

struct TokenShape {
    std::string_view prefix;
    size_t min_body;
    bool (*is_body)(char);
    bool needs_digit;
};

bool is_alnum_char(char c) { return is_alnum(c); }
bool is_word_char(char c) { return is_alnum(c) || c == '_'; }

// Personal and API tokens by their published prefixes: the prefix is kept (it says whose token it was), the body goes.
constexpr std::array<TokenShape, 17> kTokens = {{
    {"ghp_", 30, is_alnum_char, false},  // GitHub: personal, OAuth, user-to-server, server-to-server, refresh
    {"gho_", 30, is_alnum_char, false},
    {"ghu_", 30, is_alnum_char, false},
    {"ghs_", 30, is_alnum_char, false},
    {"ghr_", 30, is_alnum_char, false},
    {"github_pat_", 30, is_word_char, false},  // GitHub fine-grained
    {"glpat-", 20, is_b64url, false},          // GitLab
    {"hf_", 30, is_alnum_char, false},         // Hugging Face
    {"xoxb-", 10, is_b64url, false},           // Slack
    {"xoxp-", 10, is_b64url, false},
    {"xoxa-", 10, is_b64url, false},
    {"xoxr-", 10, is_b64url, false},
    {"xoxs-", 10, is_b64url, false},
    {"npm_", 30, is_alnum_char, false},  // npm
    {"pypi-", 50, is_b64url, false},     // PyPI
    {"AIza", 30, is_b64url, false},      // Google API keys
    {"sk-", 32, is_b64url, true},        // OpenAI and the like
}};

void tokens(std::string_view s, Spans& out) {
    for (size_t i = 0; i < s.size(); ++i) {
        if (i > 0 && is_word_char(s[i - 1])) continue;
        for (const TokenShape& t : kTokens) {
            if (s.substr(i, t.prefix.size()) != t.prefix) continue;
            const size_t body = i + t.prefix.size();
            const size_t end = run_end(s, body, t.is_body);
            if (end - body < t.min_body) continue;
            if (!t.needs_digit || std::any_of(s.begin() + body, s.begin() + end, is_digit)) add(out, body, end);
            i = end - 1;  // a long body read once, a token or not
            break;
        }
    }
}

// AKIA.../ASIA... (an AWS access key id, an identifier: kept) then the 40-character secret key paired with it.
void aws_pairs(std::string_view s, Spans& out) {
    auto is_id = [](char c) { return is_upper(c) || is_digit(c); };
    auto is_secret = [](char c) { return is_alnum(c) || c == '/' || c == '+'; };
    for (size_t i = 0; i + 20 < s.size(); ++i) {
        if ((i > 0 && is_alnum(s[i - 1])) || (s.substr(i, 4) != "AKIA" && s.substr(i, 4) != "ASIA")) continue;
        size_t j = i + 4;
        while (j < i + 20 && j < s.size() && is_id(s[j])) ++j;
        if (j < i + 20 || (j < s.size() && is_alnum(s[j]))) continue;
        const size_t sep = j;
        while (j < s.size() && (is_blank(s[j]) || in(s[j], ":,;\r\n"))) ++j;
        size_t end = j;
        while (end < s.size() && end - j <= 40 && is_secret(s[end])) ++end;
        if (j > sep && end - j == 40) add(out, j, end);
        i = j > i ? j - 1 : i;
    }
}

// -----BEGIN ... PRIVATE KEY----- ... -----END: the key's body.
void pem_keys(std::string_view s, Spans& out) {
    constexpr std::string_view kBegin = "-----BEGIN ", kEnd = "-----END";
    for (size_t b = s.find(kBegin); b != npos; b = s.find(kBegin, b + 1)) {
        const size_t head_end = s.find("-----", b + kBegin.size());
        if (head_end == npos) return;
        if (s.substr(b, head_end - b).find("PRIVATE KEY") == npos) continue;
        const size_t from = head_end + 5;
        const size_t to = s.find(kEnd, from);
        add(out, from, to == npos ? s.size() : to);
        if (to == npos) return;
        b = to;
    }
}

// ---- command lines: sshpass -p X, mysql -pX, curl -u user:X, docker login -p X ----

enum class Tool { none, sshpass, mysql, curl, docker };

Tool tool_of(std::string_view word) {
    if (const size_t slash = word.rfind('/'); slash != npos) word.remove_prefix(slash + 1);
    if (word == "sshpass") return Tool::sshpass;
    if (word == "mysql" || word == "mysqldump" || word == "mysqladmin" || word == "mariadb") return Tool::mysql;
    if (word == "curl") return Tool::curl;
    if (word == "docker" || word == "podman" || word == "nerdctl") return Tool::docker;
    return Tool::none;
}

// The words of a command line (blanks, a list's commas and brackets between them, quotes around one), to the
// command's end (; | & or a line's end): true with the next word [from, to) and where the scan goes on, or false with
// `i` at the command's end.
struct Word {
    size_t from = 0, to = 0, next = 0;
};

bool next_word(std::string_view s, size_t& i, Word& w) {
    while (i < s.size() && (is_blank(s[i]) || in(s[i], ",[]()"))) ++i;
    if (i >= s.size() || in(s[i], ";|&\r\n")) return false;
    if (is_quote(s[i])) {
        size_t close = s.find(s[i], i + 1);
        if (close == npos) close = s.size();
        w = {i + 1, close, std::min(close + 1, s.size())};
        return true;
    }
    size_t e = i;
    while (e < s.size() && !is_blank(s[e]) && !is_quote(s[e]) && !in(s[e], ",[]();|&\r\n")) ++e;
    w = {i, e, e};
    return true;
}

void command_lines(std::string_view s, Spans& out) {
    constexpr std::string_view kNoWord = " \t\r\n\"',[]();|&";  // a tool's name may stand in quotes (sh -c '...')
    Word w;
    for (size_t i = 0; i < s.size();) {
        while (i < s.size() && in(s[i], kNoWord)) ++i;
        const size_t from = i;
        while (i < s.size() && !in(s[i], kNoWord)) ++i;
        const Tool tool = tool_of(s.substr(from, i - from));
        if (tool == Tool::none) continue;
        bool secret_next = false, user_next = false;  // the argument of sshpass -p or docker login -p, of curl -u
        bool login = false;                           // docker login (docker run -p is a port)
        while (next_word(s, i, w)) {
            i = w.next;
            const std::string_view a = s.substr(w.from, w.to - w.from);
            const size_t colon = a.find(':');
            if (secret_next) add(out, w.from, w.to);
            if (user_next && colon != npos) add(out, w.from + colon + 1, w.to);
            const bool was_value = secret_next || user_next;
            secret_next = user_next = false;
            if (was_value || starts_redacted(s, w.from)) continue;
            const std::string_view flag = a.substr(0, 2);
            login = login || (tool == Tool::docker && a == "login");
            if ((tool == Tool::sshpass || login) && a == "-p") secret_next = true;
            if ((tool == Tool::sshpass || tool == Tool::mysql) && flag == "-p" && a.size() > 2 &&
                !starts_redacted(s, w.from + 2))
                add(out, w.from + 2, w.to);  // -pSECRET
            if (tool == Tool::curl && (a == "-u" || a == "-U" || a == "--user" || a == "--proxy-user"))
                user_next = true;
            const bool user_flag = flag == "-u" || flag == "-U" || a.substr(0, 7) == "--user=" ||
                                   a.substr(0, 13) == "--proxy-user=";  // -uUSER:X, --user=USER:X
            if (tool == Tool::curl && user_flag && colon != npos) add(out, w.from + colon + 1, w.to);
        }
    }
}

// Each span once, overlapping or adjacent ones merged, each replaced by "<redacted>".
std::string replace(std::string_view s, Spans& spans) {
    if (spans.empty()) return std::string(s);
    std::sort(spans.begin(), spans.end());
    std::string out;
    out.reserve(s.size() + kRedacted.size() * spans.size());
    size_t pos = 0;
    for (size_t k = 0; k < spans.size();) {
        const size_t from = std::max(pos, spans[k].first);
        size_t to = spans[k].second;
        for (++k; k < spans.size() && spans[k].first <= to; ++k) to = std::max(to, spans[k].second);
        if (to <= from) continue;
        out.append(s.substr(pos, from - pos));
        out.append(kRedacted);
        pos = to;
    }
    out.append(s.substr(pos));
    return out;
}

}  // namespace

bool is_secret_name(std::string_view name) {
    std::string up;
    up.reserve(name.size());
    for (char c : name) up += to_upper(c);
    for (std::string_view w : {"PASS", "PWD", "PSK", "TOKEN", "SECRET", "KEY", "AUTH", "CRED", "COOKIE", "JWT"})
        if (up.find(w) != npos) return true;
    bool signature = false;
    each_word(name, [&](std::string_view w) { signature = signature || is_signature_word(w); });
    return signature;
}

std::string value(std::string_view v) {
    Spans spans;
    secret_keys(v, spans);
    secret_options(v, spans);
    auth_schemes(v, spans);
    userinfo(v, spans);
    jwts(v, spans);
    tokens(v, spans);
    aws_pairs(v, spans);
    pem_keys(v, spans);
    command_lines(v, spans);
    return replace(v, spans);
}

std::string env_value(std::string_view name, std::string_view v) {
    return is_secret_name(name) ? std::string(kRedacted) : value(v);
}

std::string env_entry(std::string_view entry) {
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) return std::string(entry);
    return std::string(entry.substr(0, eq + 1)) + env_value(entry.substr(0, eq), entry.substr(eq + 1));
}

}  // namespace ncw::redact
