// The one rule that keeps secrets out of every output: the shim applies it to the environment it captures and to the
// process's last words (so no rank file, dump or live frame holds a secret) and to every line it logs, the readers
// apply it again to every environment entry and last words they load (a file or frame from an older or foreign
// writer), and the collector's `env` to the settings it shows.
#pragma once

#include <string>
#include <string_view>

namespace ncw::redact {

inline constexpr std::string_view kRedacted = "<redacted>";

// A name that holds a secret, by pattern: it contains PASS (PASSWORD, PASSWD), PWD, PSK, TOKEN, SECRET, KEY, AUTH,
// CRED (CREDENTIAL, CREDS), COOKIE or JWT, or has a word SIG or ...SIGNATURE (X-Amz-Signature, SharedAccessSignature;
// not SIGNAL), in any case. Over-redacting a harmless name (NCCL_IB_PKEY) costs its value in a report;
// under-redacting costs a secret.
bool is_secret_name(std::string_view name);

// `value` with every credential it carries replaced by "<redacted>", found by its shape:
// - the value of a key that is_secret_name accepts, bound by '=' or ": " or in quotes: ?token=..., &sig=...,
//   ;AccountKey=..., --api-key=..., "key: ...", password = ..., {"private_key": "..."}; by ':' alone (password:X,
//   pass:X) when the key's last word names a secret (not host:port, max_tokens:4096, monkey-host:29500);
// - an Authorization header's credential, its scheme kept: "Authorization: Bearer <redacted>", Basic, Token, and
//   the parameters of any other scheme (Digest, AWS4-HMAC-SHA256) to the header's end;
// - the argument after an option whose last word names a secret: --password X, --hf-token X, ['--token', 'X'];
// - Bearer X anywhere (not a word of prose: "bearer token"), Basic X where X is base64 of "user:password";
// - the password of a URL's user information, with or without a scheme: tcp://bob:pw@store:29500,
//   admin:secret@etcd:2379, redis://:pw@cache, and one holding '/' (s3://AKIA...:wJal/K7MD/bPx@bucket/path); a user
//   without a password is kept (env://user@host), as is host:port/path@x;
// - a JSON Web Token whole (eyJ...\.eyJ...\....); the body of a token with a published prefix (ghp_, gho_, ghu_,
//   ghs_, ghr_, github_pat_, glpat-, hf_, xox?-, npm_, pypi-, AIza, sk-); the secret key after an AWS access key id
//   (the id, an identifier, is kept); a PEM private key's body;
// - command lines: sshpass -p X, mysql -pX (mysql -p alone prompts: nothing follows), curl -u user:X.
// Linear in the value's size. A value of these forms, redacted at capture, reads back the same; on any text a second
// pass can only redact more (the readers redact again), never bring a secret back.
std::string value(std::string_view value);

// NAME's value as it may be shown: "<redacted>" whole for a secret name, else value().
std::string env_value(std::string_view name, std::string_view value);

// "NAME=value" as it may be shown; an entry without '=' is kept as it is.
std::string env_entry(std::string_view entry);

}  // namespace ncw::redact
