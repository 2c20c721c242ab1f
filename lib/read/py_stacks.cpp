// The Python stacks of a rank file, parsed (see py_stacks.h).
#include "read/py_stacks.h"

#include <cstdlib>

namespace ncw::py {

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\r' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

uint64_t hex_value(std::string_view s, bool* ok) {
    if (starts_with(s, "0x") || starts_with(s, "0X")) s.remove_prefix(2);
    uint64_t v = 0;
    *ok = !s.empty() && s.size() <= 16;
    for (char c : s) {
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) {
            *ok = false;
            return 0;
        }
        v = v * 16 + uint64_t(d);
    }
    return v;
}

// "Thread 0x00007f... (most recent call first):" / "Current thread 0x... (most recent call first):"
bool thread_line(std::string_view line, Thread& t) {
    bool current = false;
    if (starts_with(line, "Current thread ")) {
        current = true;
        line.remove_prefix(15);
    } else if (starts_with(line, "Thread ")) {
        line.remove_prefix(7);
    } else {
        return false;
    }
    const size_t sp = line.find(' ');
    bool ok = false;
    const uint64_t id = hex_value(line.substr(0, sp), &ok);
    if (!ok) return false;
    t = Thread{};
    t.ident = id;
    t.current = current;
    return true;
}

// '  File "x.py", line 14 in slow_eval' (3.11; "line ???" when unknown)
bool frame_line(std::string_view line, Frame& f) {
    line = trim(line);
    if (!starts_with(line, "File \"")) return false;
    line.remove_prefix(6);
    const size_t q = line.rfind("\", line ");
    if (q == std::string_view::npos) return false;
    f.file = std::string(line.substr(0, q));
    std::string_view rest = line.substr(q + 8);
    const size_t in = rest.find(" in ");
    const std::string_view num = rest.substr(0, in);
    f.line = num == "???" ? 0 : std::atoi(std::string(num).c_str());
    f.func = in == std::string_view::npos ? std::string("???") : std::string(rest.substr(in + 4));
    return true;
}

std::string_view base_name(std::string_view file) {
    const size_t slash = file.rfind('/');
    return slash == std::string_view::npos ? file : file.substr(slash + 1);
}

bool is_wrapper_name(std::string_view f) {
    for (std::string_view w : {"wrapper", "_wrapper", "inner", "_fn", "wrapped", "decorated", "decorate_context"})
        if (f == w) return true;
    return false;
}

}  // namespace

Stacks parse(std::string_view text) {
    Stacks out;
    Thread* cur = nullptr;
    while (!text.empty()) {
        const size_t nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (trim(line).empty()) continue;
        if (starts_with(line, "# ncclwatch nccl-thread ")) {
            // "# ncclwatch nccl-thread 0x<pthread_t> tid <tid>"
            std::string_view rest = line.substr(24);
            const size_t sp = rest.find(' ');
            bool ok = false;
            NcclThread n;
            n.ident = hex_value(rest.substr(0, sp), &ok);
            const size_t t = rest.find("tid ");
            if (ok && t != std::string_view::npos) {
                n.tid = uint32_t(std::strtoul(std::string(rest.substr(t + 4)).c_str(), nullptr, 10));
                out.nccl_threads.push_back(n);
            }
            continue;
        }
        Thread t;
        if (thread_line(line, t)) {
            out.threads.push_back(std::move(t));
            cur = &out.threads.back();
            continue;
        }
        Frame f;
        if (cur && frame_line(line, f)) {
            cur->frames.push_back(std::move(f));
            continue;
        }
        if (cur && trim(line) == "...") {
            cur->truncated = true;
            continue;
        }
        out.notes.emplace_back(trim(line));
    }
    return out;
}

bool is_library_file(std::string_view file) {
    if (file.empty() || file.front() == '<') return true;  // <frozen importlib._bootstrap>, <string>
    for (std::string_view part : {"/site-packages/", "/dist-packages/", "/torch/"})
        if (file.find(part) != std::string_view::npos) return true;
    // The standard library: .../lib/python3.11/x.py (and lib64), not a folder below it that no package holds.
    const size_t at = file.find("/lib/python");
    const size_t at64 = file.find("/lib64/python");
    return at != std::string_view::npos || at64 != std::string_view::npos;
}

const Thread* nccl_thread(const Stacks& s, uint32_t tid) {
    if (s.threads.empty()) return nullptr;
    auto by_ident = [&](uint64_t ident) -> const Thread* {
        for (const Thread& t : s.threads)
            if (t.ident == ident) return &t;
        return nullptr;
    };
    // A thread with no Python frame ("<no Python frame>": PyTorch's autograd thread, which issues DDP's all_reduces
    // and has a thread state for its Python hooks) says nothing of where the rank is: the next one is asked.
    if (tid)
        for (const NcclThread& n : s.nccl_threads)
            if (n.tid == tid)
                if (const Thread* t = by_ident(n.ident); t && !t->frames.empty()) return t;
    for (const NcclThread& n : s.nccl_threads)
        if (const Thread* t = by_ident(n.ident); t && !t->frames.empty()) return t;
    for (const NcclThread& n : s.nccl_threads)
        if (const Thread* t = by_ident(n.ident)) return t;
    return &s.threads.back();
}

Where where(const Thread& t) {
    Where w;
    if (t.frames.empty()) return w;
    size_t i = 0;
    while (i < t.frames.size() && is_library_file(t.frames[i].file)) ++i;
    if (i == t.frames.size()) i = 0;
    w.known = true;
    w.at = t.frames[i];
    // The library function the user's frame calls: the nearest one that is not a decorator's wrapper (torch's
    // all_reduce runs inside c10d_logger's "wrapper").
    for (size_t k = i; k-- > 0;) {
        if (w.callee.empty()) w.callee = t.frames[k].func;
        if (!is_wrapper_name(t.frames[k].func)) {
            w.callee = t.frames[k].func;
            break;
        }
    }
    if (i + 1 < t.frames.size()) {
        w.has_caller = true;
        w.caller = t.frames[i + 1];
    }
    return w;
}

std::string location(const Frame& f) {
    std::string out(base_name(f.file));
    out += ':';
    out += f.line ? std::to_string(f.line) : std::string("?");
    return out;
}

std::string frame_words(const Frame& f) { return f.func + " (" + location(f) + ")"; }

std::string where_words(const Where& w) {
    if (!w.known) return "";
    std::string out = frame_words(w.at);
    if (w.has_caller) out += ", called from " + frame_words(w.caller);
    return out;
}

std::string wait_words(const Where& w) {
    if (!w.known) return "";
    return (w.callee.empty() ? w.at.func : w.callee) + " at " + location(w.at);
}

}  // namespace ncw::py
