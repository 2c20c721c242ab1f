// A vector that its copies share until one of them is written: what a rank file's signature window is, since every
// analysis hands it on unchanged (file slot -> snapshot -> the engine's rank state -> a copy for the analysis thread).
// Copying 131,072 ranks' 64 signatures each was most of a large job's analysis. Reads never copy: every accessor is
// const. Writes say so (push_back, assign, mut()), and copy the elements first only if another copy still holds them.
#pragma once

#include <atomic>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

namespace ncw {

template <typename T>
class CowVector {
public:
    using value_type = T;
    using const_iterator = typename std::vector<T>::const_iterator;
    using iterator = const_iterator;  // read-only: range-for over a non-const one must not copy

    CowVector() = default;
    CowVector(std::vector<T> v) { *this = std::move(v); }  // NOLINT: implicit, as a vector is assigned to it
    CowVector(std::initializer_list<T> v) : CowVector(std::vector<T>(v)) {}
    CowVector& operator=(std::vector<T> v) {
        data_ = v.empty() ? nullptr : std::make_shared<std::vector<T>>(std::move(v));
        return *this;
    }

    const_iterator begin() const noexcept { return view().begin(); }
    const_iterator end() const noexcept { return view().end(); }
    size_t size() const noexcept { return data_ ? data_->size() : 0; }
    bool empty() const noexcept { return size() == 0; }
    const T& operator[](size_t i) const noexcept { return (*data_)[i]; }
    const T& front() const noexcept { return data_->front(); }
    const T& back() const noexcept { return data_->back(); }
    const std::vector<T>& view() const noexcept { return data_ ? *data_ : empty_vector(); }

    // The elements to write, copied first if another CowVector shares them.
    std::vector<T>& mut() {
        if (!data_)
            data_ = std::make_shared<std::vector<T>>();
        else if (data_.use_count() > 1)
            data_ = std::make_shared<std::vector<T>>(*data_);
        else
            std::atomic_thread_fence(std::memory_order_acquire);  // after the last other copy's reads
        return *data_;
    }
    void push_back(T v) { mut().push_back(std::move(v)); }
    template <typename... A>
    T& emplace_back(A&&... a) {
        return mut().emplace_back(std::forward<A>(a)...);
    }
    void assign(size_t n, const T& v) { mut().assign(n, v); }
    void reserve(size_t n) { mut().reserve(n); }
    void clear() noexcept { data_.reset(); }

    friend bool operator==(const CowVector& a, const CowVector& b) { return a.view() == b.view(); }

private:
    static const std::vector<T>& empty_vector() noexcept {
        static const std::vector<T> none;
        return none;
    }
    // Never written through while shared (mut() copies first); shared_ptr's count is atomic, so copies may live on
    // other threads (the live collector's analysis thread).
    std::shared_ptr<std::vector<T>> data_;
};

}  // namespace ncw
