// oil.h: the footprint of your own C++ objects, with the numbers oi-trace gives.
//
//   #include <oil.h>
//   std::string j = oil::json(cache);   // the JSON `oi-trace --format json` prints for it
//   std::string t = oil::tree(cache);   // the readable tree (`--format tree`)
//   std::size_t n = oil::size(cache);   // its inclusive size in bytes (the root's `size`)
//
// Build with g++ -g (-std=c++17 or later) and link liboil.so:
//   g++ -g -std=c++17 -I oil/include app.cpp -L target/release -loil -Wl,-rpath,$PWD/target/release
//
// The type is found from typeid(T) in the debug information of the module that uses it (the
// executable or a shared library, or their separate debug files); the walker is compiled at
// the first call for each (type, features) and kept for the life of the process, so later
// calls cost the walk only. Calls are thread-safe. Failures (no debug information, type not
// found, a corrupt object) throw oil::Error with a one-line message; a corrupt object never
// crashes the program. The object must not be modified by another thread during the call.
#ifndef OIL_H
#define OIL_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

extern "C" {
struct oil_type;
// What a thread's walks keep between calls, zeroed before a thread's first call, one per
// thread; liboil sets it, the steady state of oil::size reads it. A walk may start on this
// thread's stack at a stack pointer sp iff sp - floor < span; walks_to_check counts down to
// the next check of the fault handler (0: check now, which liboil does).
struct oil_thread {
    std::uintptr_t floor;
    std::uintptr_t span;
    std::uintptr_t walks_to_check;
};
// The start of every oil_type, what the steady state of oil::size needs. leaf_entry is the
// compiled walker of sizes, called directly: (object, bias) in, (status, size) out, status 0
// when done; a fault in it makes it return another status. A type with no such walker (yet)
// has oil_not_direct there, which returns a status other than 0. It may be called only while
// *handlers_changed is 0 (liboil's fault handler may have been replaced).
struct oil_type_head {
    std::uintptr_t leaf_entry;
    std::uint64_t bias;
    const unsigned char* handlers_changed;
};
typedef void (*oil_append_fn)(void* ctx, const char* bytes, std::size_t len);
const oil_type* oil_type_lookup(const char* type_name, std::size_t type_size,
                                const void* const* hints, std::size_t nhints,
                                const char* const* features, std::size_t nfeatures,
                                oil_append_fn error, void* error_ctx);
int oil_size(const oil_type* type, const void* object, std::uint64_t* size, oil_append_fn error,
             void* error_ctx);
// The steady state of oil_size: status 0 and the size, or another status when oil_size
// must be asked.
struct oil_steady {
    std::uint64_t status;
    std::uint64_t size;
};
oil_steady oil_size_steady(const oil_type* type, const void* object, oil_thread* thread);
// oil_type_head::leaf_entry of a type whose walker oil.h may not call directly: status not 0.
oil_steady oil_not_direct(std::uint64_t object, std::uint64_t bias);
int oil_report(const oil_type* type, const void* object, int format, oil_append_fn append,
               void* out_ctx, void* error_ctx);
std::uint64_t oil_compilations(void);
}

namespace oil {

// OI feature names, as oi-trace's --feature: "chase-raw-pointers", "capture-keys",
// "polymorphic-inheritance"; and "sizes-oi" for Object Introspection's sizes instead of the
// real ones (oi-trace's --sizes oi).
struct Options {
    std::vector<std::string> features;
};

class Error : public std::runtime_error {
    using runtime_error::runtime_error;
};

namespace detail {

struct Text {
    std::string text;
    bool failed = false;
};

inline void append(void* ctx, const char* bytes, std::size_t len) noexcept {
    Text* t = static_cast<Text*>(ctx);
    try {
        t->text.append(bytes, len);
    } catch (...) {
        t->failed = true;
    }
}

// An address in the code of the module this is compiled into (always inlined, so never a
// copy in another module): where the type's debug information is looked for first.
__attribute__((always_inline)) inline const void* here() {
#if defined(__x86_64__)
    const void* p;
    __asm__("leaq 0(%%rip), %0" : "=r"(p));
    return p;
#else
    return __builtin_return_address(0);
#endif
}

inline const oil_type* lookup(const std::type_info& type, std::size_t size,
                              const void* const* hints, std::size_t nhints,
                              const Options& opts) {
    std::vector<const char*> features;
    features.reserve(opts.features.size());
    for (const std::string& f : opts.features) features.push_back(f.c_str());
    Text error;
    const oil_type* t = oil_type_lookup(type.name(), size, hints, nhints, features.data(),
                                        features.size(), &append, &error);
    if (t == nullptr) throw Error(error.failed ? "oil: out of memory" : error.text);
    return t;
}

template <class T>
const oil_type* lookup_of(const T& obj, const Options& opts) {
    const void* hints[3];
    std::size_t n = 0;
    hints[n++] = here();
    if constexpr (std::is_polymorphic<T>::value) {
        // The vtable lives in the module that defines the class's key function.
        hints[n++] = *reinterpret_cast<const void* const*>(&obj);
    }
    hints[n++] = &typeid(T);
    return lookup(typeid(T), sizeof(T), hints, n, opts);
}

// The walker of T without features, cached here after the first call (one load; no lookup
// by name, not even the library's cache).
template <class T>
inline const oil_type* type_of(const T& obj) {
    static_assert(std::is_class<T>::value || std::is_union<T>::value,
                  "oil measures objects of class, struct or union type");
    static std::atomic<const oil_type*> cached{nullptr};
    const oil_type* t = cached.load(std::memory_order_acquire);
    if (__builtin_expect(t == nullptr, 0)) {
        t = lookup_of(obj, Options{});
        cached.store(t, std::memory_order_release);
    }
    return t;
}

template <class T>
inline const oil_type* type_of(const T& obj, const Options& opts) {
    if (!opts.features.empty()) return lookup_of(obj, opts);
    return type_of<T>(obj);
}

// This thread's oil_thread: a thread_local of the module that includes oil.h (in an
// executable, one %fs-relative access; liboil's own thread-locals would each cost a call).
inline oil_thread* thread_state() noexcept {
    static thread_local oil_thread state{};
    return &state;
}

// The general path of oil::size (the first call of a type, a corrupt object...), kept out of
// line so that the steady state stays small where it is inlined.
__attribute__((noinline)) inline std::size_t size_general(const oil_type* t, const void* obj) {
    Text error;
    std::uint64_t s = 0;
    if (oil_size(t, obj, &s, &append, &error) != 0)
        throw Error(error.failed ? "oil: out of memory" : error.text);
    return static_cast<std::size_t>(s);
}

template <class T>
std::string report(const T& obj, const Options& opts, int format) {
    const oil_type* t = type_of(obj, opts);
    Text out, error;
    if (oil_report(t, &obj, format, &append, &out, &error) != 0)
        throw Error(error.failed ? "oil: out of memory" : error.text);
    if (out.failed) throw std::bad_alloc();
    return std::move(out.text);
}

}  // namespace detail

// The JSON report oi-trace prints for this object as a probed function's arg0
// (`oi-trace --format json`), byte for byte, newline included.
template <class T>
std::string json(const T& obj, const Options& opts = {}) {
    return detail::report(obj, opts, 0);
}

// The same as a readable tree (`oi-trace --format tree`).
template <class T>
std::string tree(const T& obj, const Options& opts = {}) {
    return detail::report(obj, opts, 2);
}

namespace detail {

// oil::size after the steady state could not give it: the walker through liboil (a thread's
// first call, a fault handler check that is due, a stack without room...), else the general
// path. Out of line, so that what is inlined stays small.
__attribute__((noinline)) inline std::size_t size_slow(const oil_type* t, const void* obj) {
    oil_steady s = oil_size_steady(t, obj, thread_state());
    if (s.status == 0) return static_cast<std::size_t>(s.size);
    return size_general(t, obj);
}

// The steady state of oil::size: the type's compiled walker called directly (no call into
// liboil, no trampoline), after a few inline checks that it may run here now: the fault
// handler need not be checked, and this thread's stack has room below the current stack
// pointer (a type with no such walker has oil_not_direct, which says so). A fault in the
// walker returns here with a non-zero status (liboil's handler unwinds the walker's one
// frame), and the slow path then gives the answer or the error.
inline std::size_t size_of(const oil_type* t, const void* obj) {
    const oil_type_head* h = reinterpret_cast<const oil_type_head*>(t);
    std::uintptr_t entry = __atomic_load_n(&h->leaf_entry, __ATOMIC_ACQUIRE);
    oil_thread* th = thread_state();
    std::uintptr_t sp;
#if defined(__x86_64__)
    // Volatile: read at this call, never hoisted above an alloca of the caller.
    __asm__ __volatile__("movq %%rsp, %0" : "=r"(sp));
#else
    sp = 0;  // no direct walks: the slow path decides
#endif
    if (__builtin_expect(sp - th->floor < th->span && th->walks_to_check != 0 &&
                             __atomic_load_n(h->handlers_changed, __ATOMIC_ACQUIRE) == 0,
                         1)) {
        th->walks_to_check--;
        typedef oil_steady (*walker_fn)(const void*, std::uint64_t);
        oil_steady s = reinterpret_cast<walker_fn>(entry)(obj, h->bias);
        if (__builtin_expect(s.status == 0, 1)) return static_cast<std::size_t>(s.size);
    }
    return size_slow(t, obj);
}

}  // namespace detail

// The object's inclusive size in bytes: the `size` of the report's root.
template <class T>
std::size_t size(const T& obj, const Options& opts) {
    return detail::size_of(detail::type_of(obj, opts), &obj);
}

// The same without options (an overload rather than a default argument: no Options object
// is built and destroyed at each call).
template <class T>
std::size_t size(const T& obj) {
    return detail::size_of(detail::type_of<T>(obj), &obj);
}

// How many walkers this process has built (a test's way to see that concurrent first calls
// compile once).
inline std::uint64_t compilations() { return oil_compilations(); }

}  // namespace oil

#endif  // OIL_H
