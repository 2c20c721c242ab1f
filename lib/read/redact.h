// The one rule that keeps secrets out of every output: the shim applies it to the environment it captures (so no
// rank file, dump or live frame holds a secret), the readers apply it again to every environment entry they load
// (a file or frame from an older or foreign writer), and the collector's `env` to the settings it shows.
#pragma once

#include <string>
#include <string_view>

namespace ncw::redact {

inline constexpr std::string_view kRedacted = "<redacted>";

// A name that holds a secret, by pattern: it contains PASS (PASSWORD, PASSWD), PWD, PSK, TOKEN, SECRET, KEY, AUTH,
// CRED (CREDENTIAL, CREDS) or COOKIE, in any case. Over-redacting a harmless name (NCCL_IB_PKEY) costs its value in
// a report; under-redacting costs a secret.
bool is_secret_name(std::string_view name);

// `value` with every credential it carries replaced by "<redacted>":
// - the password of a URL's user information, with or without a scheme: tcp://bob:pw@store:29500,
//   admin:secret@etcd:2379, redis://:pw@cache (a user without a password is kept: env://user@host);
// - the value of a key that is_secret_name accepts, in a query string or an option list: ?token=..., &passwd=...,
//   ;password=..., --api-key=..., "key: ...".
std::string value(std::string_view value);

// NAME's value as it may be shown: "<redacted>" whole for a secret name, else value().
std::string env_value(std::string_view name, std::string_view value);

// "NAME=value" as it may be shown; an entry without '=' is kept as it is.
std::string env_entry(std::string_view entry);

}  // namespace ncw::redact
