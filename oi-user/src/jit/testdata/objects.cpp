// Objects for the JIT's differential tests (oi-user/src/jit/tests.rs). Built as a shared
// library and dlopen'ed into the test process: make_* build real libstdc++ objects and
// return their address; probe_* exist only so that their parameters' DWARF types give the
// plans (they are never called).
#include <array>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

namespace fx {

struct Node {
    int v;
    Node* next;
};

// A chain whose pointer is not its last walked member: no tail call, a frame per node.
struct RNode {
    RNode* next;
    std::string s;
};

struct Tree {
    std::string name;
    std::vector<std::shared_ptr<Tree>> kids;
    std::weak_ptr<Tree> parent;
};

struct Cyc {
    int x;
    std::shared_ptr<Cyc> other;
};

struct Pointers {
    std::shared_ptr<std::vector<uint64_t>> a, b;
    std::unique_ptr<std::string> u;
    std::unique_ptr<int> none;
    std::shared_ptr<Cyc> cyc;
    std::reference_wrapper<std::vector<int>> ref;
    Pointers(std::vector<int>& r) : ref(r) {}
};

struct Raw {
    int a;
    int* p;
    void* q;
    Node* n;
    const char* s;
};

struct Mixed {
    std::optional<std::string> o1, o2;
    std::variant<int, std::string, std::vector<int>> v1, v2, v3;
    std::pair<std::string, int> p;
    std::string arr[3];
    std::array<std::vector<int>, 2> sa;
    std::vector<bool> bits;
    int plain[4];
};

struct Base {
    virtual ~Base() {}
    int b = 1;
};
struct Derived : Base {
    std::vector<std::string> extra;
};

struct Holder {
    Base* obj;
};

struct Opaque;
union U56 {
    char c[56];
    long l;
};
struct Bits {
    int x : 3;
    char a : 3;
    char b : 5;
};
struct Elem {
    int id;
    std::string label;
    char pad;
};
struct Everything {
    int i32;
    U56 u;
    Bits bits;
    Elem elems[7];
    std::array<std::string, 3> names;
    std::tuple<std::string, int, std::vector<int>> tup;
    std::multimap<int, std::string> mm;
    std::multiset<std::string> ms;
    std::unordered_multimap<int, std::vector<int>> umm;
    std::map<int, std::map<std::string, std::set<int>>> nested_maps;
    std::deque<std::deque<int>> dd;
    std::list<std::vector<std::string>> lv;
    std::optional<std::vector<std::string>> ov;
    std::variant<std::monostate, std::map<int, int>, std::string> var;
    std::shared_ptr<Opaque> opaque;
    std::unique_ptr<int[]> arr;
    std::unique_ptr<Everything> self;
    std::vector<std::pair<int, std::string>> pairs;
    std::map<std::pair<int, int>, int> by_pair;
    long double ld;
    void (*fn)(int);
    int matrix[2][3];
};

using Strings = std::vector<std::string>;
using Nested = std::vector<std::vector<std::vector<int>>>;
using SMap = std::map<std::string, std::vector<int>>;
using IMap = std::map<int, std::string>;
using UMap = std::unordered_map<std::string, std::string>;
using IUMap = std::unordered_map<long, int>;
using SSet = std::set<std::string>;
using USet = std::unordered_set<int>;
using SList = std::list<std::string>;
using IDeque = std::deque<int>;
using SDeque = std::deque<std::string>;
using Uniques = std::vector<std::unique_ptr<int>>;
// Pointers into one int array, each element pointed at twice: eight keys to a 32-byte
// granule, the case that the visited set's home slots leave to probing.
using IntPtrs = std::vector<int*>;

static std::string str(int i, int len) {
    std::string s;
    for (int j = 0; j < len; j++) s.push_back('a' + (i + j) % 26);
    return s;
}

// A hand-written small-buffer vector, described in tests.rs (`describe`): elements inline
// until more than N, then on the heap; `flags_` bit 0 set when spilled.
template <typename T, int N>
struct SmallVec {
    T* data_;
    uint32_t size_;
    uint16_t cap_;
    uint8_t flags_;
    alignas(T) unsigned char buf_[N * sizeof(T)];
    SmallVec() : data_(reinterpret_cast<T*>(buf_)), size_(0), cap_(N), flags_(0) {}
    void push(const T& v) {
        if (size_ == cap_) {
            uint16_t c = cap_ * 2;
            T* d = static_cast<T*>(::operator new(sizeof(T) * c));
            for (uint32_t i = 0; i < size_; i++) {
                new (d + i) T(std::move(data_[i]));
                data_[i].~T();
            }
            if (flags_ & 1) ::operator delete(data_);
            data_ = d;
            cap_ = c;
            flags_ |= 1;
        }
        new (data_ + size_++) T(v);
    }
};

// An array of owned pointers (as protobuf's RepeatedPtrField keeps its elements).
struct OwnedPtrs {
    std::string** items;
    uint64_t n;
    uint64_t cap;
};

// Swiss tables (`control_bytes`), described in tests.rs. `Swiss`: capacity 0 (a static
// empty group, no slots) or 2^k - 1, one control byte per slot (full: high bit clear; 0x80
// empty, 0xfe deleted), a sentinel and 15 cloned bytes, then the slots. `Grouped`: groups
// of 15 slots whose control bytes fill 15 of 16 bytes (the 16th, 0 here, is no slot's).
template <typename T>
struct Swiss {
    int8_t* ctrl_;
    T* slots_;
    uint64_t size_;
    uint64_t capacity_;
};

template <typename T>
struct Grouped {
    unsigned char* ctrl_;
    T* slots_;
    uint64_t size_;
    uint64_t capacity_;
};

struct Swisses {
    Swiss<std::string> s;
    Grouped<std::string> g;
    Swiss<long> l;
};

// A node-chain hash map (`node_chains`, as protobuf's Map keeps its nodes): a table of
// `buckets_` chain heads, each node its pair and its next pointer. Tagged string pointers
// (`tagged_pointer`, as protobuf's ArenaStringPtr: tag 2 an owned string, tag 0 a shared
// default) and raw pointers an `[[owned]]` rule owns (protobuf's singular sub-messages).
// All described in tests.rs.
template <typename K, typename V>
struct Pair {
    K first;
    V second;
};

template <typename K, typename V>
struct Chained {
    uint64_t size_;
    uint64_t buckets_;
    void** table_;
    struct Node {
        Pair<K, V> kv;
        Node* next;
    };
};

struct Tagged {
    void* ptr_;
};

struct PartBase {
    long id;
};

struct Part : PartBase {
    std::string name;
};

struct Chains {
    Chained<long, std::string> m;
    Chained<int, long> ints;
    Tagged owned;
    Tagged shared;
    Tagged null;
    Part* part;
    Part* no_part;
    std::string* not_owned;
};

// A node-chain map whose bucket pairs (0, 1) and (B-2, B-1) share a tree, as protobuf's
// Map once a chain would exceed 8 nodes: `table_[b] == table_[b^1]`, a std::map from key to
// node (`node_chains.tree` in tests.rs), each node's `next` null.
struct TreeChains {
    Chained<long, std::string> m;
    Chained<long, std::string> empty;
};
using NodeTree = std::map<long, void*>;
static_assert(sizeof(NodeTree) == 48, "tests.rs describes a 48-byte tree, root at 16");
static_assert(sizeof(std::_Rb_tree_node<NodeTree::value_type>) == 48, "48-byte tree nodes");

struct Smalls {
    SmallVec<int, 4> few;
    SmallVec<int, 4> many;
    SmallVec<std::string, 2> strs;
    std::vector<SmallVec<long, 3>> nested;
};

}  // namespace fx

using namespace fx;

#define PROBE(T, name) \
    __attribute__((noinline, used)) void name(T* p) { asm volatile("" ::"r"(p)); }

PROBE(Strings, probe_strings)
PROBE(Nested, probe_nested)
PROBE(SMap, probe_smap)
PROBE(IMap, probe_imap)
PROBE(UMap, probe_umap)
PROBE(IUMap, probe_iumap)
PROBE(SSet, probe_sset)
PROBE(USet, probe_uset)
PROBE(SList, probe_slist)
PROBE(IDeque, probe_ideque)
PROBE(SDeque, probe_sdeque)
PROBE(Mixed, probe_mixed)
PROBE(Pointers, probe_pointers)
PROBE(Tree, probe_tree)
PROBE(Raw, probe_raw)
PROBE(Node, probe_node)
PROBE(RNode, probe_rnode)
PROBE(Uniques, probe_uniques)
PROBE(Base, probe_base)
PROBE(Holder, probe_holder)
PROBE(std::vector<int>, probe_ints)
PROBE(Everything, probe_everything)
PROBE(Smalls, probe_smalls)
PROBE(OwnedPtrs, probe_owned)
PROBE(Swisses, probe_swisses)
PROBE(Chains, probe_chains)
PROBE(TreeChains, probe_tree_chains)
PROBE(IntPtrs, probe_intptrs)

__attribute__((noinline, used)) void probe_two(Strings* a, IMap* b) {
    asm volatile("" ::"r"(a), "r"(b));
}

static int8_t swiss_empty_group[16] = {-128, -128, -128, -128, -128, -128, -128, -128,
                                      -128, -128, -128, -128, -128, -128, -128, -1};

// n elements in each table, at slots 2j mod capacity (distinct: the capacity is odd).
template <typename T, typename V>
static void fill_swiss(Swiss<T>& t, int n, V value) {
    t.size_ = uint64_t(n);
    if (n == 0) {
        t.ctrl_ = swiss_empty_group;
        t.slots_ = nullptr;
        t.capacity_ = 0;
        return;
    }
    uint64_t c = 1;
    while (c < 2 * uint64_t(n) + 1) c = 2 * c + 1;
    size_t ctrl = (c + 16 + 7) / 8 * 8;
    auto* block = static_cast<unsigned char*>(::operator new(ctrl + c * sizeof(T)));
    t.ctrl_ = reinterpret_cast<int8_t*>(block);
    t.slots_ = reinterpret_cast<T*>(block + ctrl);
    t.capacity_ = c;
    for (uint64_t i = 0; i < c + 16; i++) block[i] = i % 2 ? 0xfe : 0x80;
    block[c] = 0xff;
    for (int j = 0; j < n; j++) {
        uint64_t at = 2 * uint64_t(j) % c;
        block[at] = uint8_t(j & 0x7f);
        new (t.slots_ + at) T(value(j));
    }
}

static void* chains_empty_table[1] = {nullptr};

// n nodes, node j at the head of bucket j % B (B: 1 for the empty map, whose table is a
// shared static one, else the power of two ≥ n / 2, so that chains are 1 to 3 long).
template <typename K, typename V, typename F>
static void fill_chains(Chained<K, V>& m, int n, F pair) {
    using Node = typename Chained<K, V>::Node;
    m.size_ = uint64_t(n);
    if (n == 0) {
        m.buckets_ = 1;
        m.table_ = chains_empty_table;
        return;
    }
    uint64_t b = 1;
    while (b < uint64_t(n) / 2) b *= 2;
    m.buckets_ = b;
    m.table_ = new void*[b]();
    for (int j = 0; j < n; j++) {
        auto* node = new Node{pair(j), static_cast<Node*>(m.table_[j % b])};
        m.table_[j % b] = node;
    }
}

extern "C" {

void* make_strings(int n) {
    auto* v = new Strings();
    v->reserve(n + 3);
    // Every 17th string is long: lengths and capacities of two-byte words in the stream.
    for (int i = 0; i < n; i++) v->push_back(str(i, i % 17 == 16 ? 130 + i : i % 40));
    return v;
}

// The pause bench's vector (`bench_target pause vecstr`): "string number i on the heap",
// nine in ten of them the same length and capacity.
void* make_bench_strings(int n) {
    auto* v = new Strings();
    for (int i = 0; i < n; i++) v->push_back("string number " + std::to_string(i) + " on the heap");
    return v;
}

// Varied strings (`bench_target pause vecvaried`): random lengths 0-39 from a fixed seed,
// so that "the same as the one before" is a coin flip (1 in 40).
void* make_varied_strings(int n) {
    auto* v = new Strings();
    v->reserve(n);
    uint64_t x = 0x9e3779b97f4a7c15;
    for (int i = 0; i < n; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        v->emplace_back((x >> 33) % 40, 'v');
    }
    return v;
}

// Groups of four strings by kind, for the stream's runs of repeated groups: 'a' four
// alike heap strings of 32 characters, 'b' four inline strings of 1 to 4 characters, 'l' a
// 'b' group whose third string has 200 characters (words of two bytes: a long group), 'c'
// an 'a' group whose second string has 33. The kinds repeat after the last.
void* make_run_strings(int n) {
    static const char kinds[] = "aaaaaaaaaabbbbblbbbbbllcaaaaaaaaa";
    auto* v = new Strings();
    v->reserve(n);
    for (int i = 0; i < n; i++) {
        char k = kinds[(i / 4) % (sizeof kinds - 1)];
        int j = i % 4;
        size_t len = k == 'a' ? 32 : k == 'c' ? (j == 1 ? 33 : 32) : k == 'l' && j == 2 ? 200 : j + 1;
        v->push_back(std::string(len, char('a' + j)));
    }
    return v;
}

// String i of a vector of strings as the stream has it: its length, and its capacity
// when on the heap (at least 1), else 0.
void string_words_at(const void* p, int i, uint64_t* out) {
    auto& s = (*static_cast<const Strings*>(p))[i];
    const char* d = s.data();
    const char* o = reinterpret_cast<const char*>(&s);
    bool inside = d >= o && d < o + sizeof s;
    out[0] = s.size();
    out[1] = inside ? 0 : std::max<uint64_t>(s.capacity(), 1);
}

// A hand-written walk of a vector of strings (the bench fixture's): the baseline of
// tests.rs's `string_loop_cost`.
size_t native_walk_strings(const void* p) {
    auto& v = *static_cast<const Strings*>(p);
    size_t s = sizeof v + v.capacity() * sizeof(std::string);
    for (auto& x : v) s += x.capacity();
    return s;
}

// The empty vector that never allocated: begin = end = nullptr.
void* make_unallocated_strings() { return new Strings(); }

void* make_nested() {
    auto* v = new Nested();
    for (int i = 0; i < 5; i++) {
        std::vector<std::vector<int>> mid;
        for (int j = 0; j < i; j++) mid.push_back(std::vector<int>(j * 3 + 1, j));
        v->push_back(mid);
    }
    return v;
}

void* make_smap() {
    auto* m = new SMap();
    for (int i = 0; i < 50; i++) (*m)[str(i, 5 + i % 30)] = std::vector<int>(i % 7, i);
    return m;
}

void* make_imap() {
    auto* m = new IMap();
    for (int i = -20; i < 100; i += 3) (*m)[i] = str(i + 20, (i + 20) % 33);
    return m;
}

void* make_umap() {
    auto* m = new UMap();
    for (int i = 0; i < 40; i++) (*m)[str(i, 3 + i % 25)] = str(i * 7, i % 50);
    return m;
}

void* make_iumap() {
    auto* m = new IUMap();
    for (long i = -10; i < 30; i++) (*m)[i * 1000] = (int)i;
    return m;
}

void* make_sset() {
    auto* s = new SSet();
    for (int i = 0; i < 300; i++) s->insert(str(i, 10 + i % 20));
    return s;
}

void* make_uset() {
    auto* s = new USet();
    for (int i = 0; i < 100; i++) s->insert(i * 31);
    return s;
}

void* make_slist() {
    auto* l = new SList();
    for (int i = 0; i < 30; i++) l->push_back(str(i, i));
    return l;
}

void* make_ideque(int n) {
    auto* d = new IDeque();
    for (int i = 0; i < n; i++) d->push_back(i);
    for (int i = 0; i < n / 3; i++) d->pop_front();
    for (int i = 0; i < n / 5; i++) d->push_front(-i);
    return d;
}

void* make_sdeque() {
    auto* d = new SDeque();
    for (int i = 0; i < 100; i++) d->push_back(str(i, i % 35));
    return d;
}

void* make_mixed() {
    auto* m = new Mixed();
    m->o1 = str(1, 30);
    m->v1 = 7;
    m->v2 = str(2, 40);
    m->v3 = std::vector<int>(9, 1);
    m->p = {str(3, 20), 5};
    m->arr[0] = "x";
    m->arr[2] = str(4, 60);
    m->sa[1] = std::vector<int>(3);
    m->bits = std::vector<bool>(100, true);
    return m;
}

void* make_pointers() {
    static std::vector<int> referent(12, 3);
    auto* p = new Pointers(referent);
    p->a = std::make_shared<std::vector<uint64_t>>(5, 1);
    p->b = p->a;  // shared: counted once
    p->u = std::make_unique<std::string>(str(5, 50));
    auto c1 = std::make_shared<Cyc>();
    auto c2 = std::make_shared<Cyc>();
    c1->other = c2;
    c2->other = c1;  // cycle (leaked on purpose)
    p->cyc = c1;
    return p;
}

void* make_tree() {
    auto* root = new Tree{"root", {}, {}};
    auto shared = std::make_shared<Tree>(Tree{str(9, 40), {}, {}});
    for (int i = 0; i < 4; i++) {
        auto k = std::make_shared<Tree>(Tree{str(i, 10 * i), {}, {}});
        k->kids.push_back(shared);
        root->kids.push_back(k);
    }
    return root;
}

void* make_raw() {
    static int x = 5;
    static Node n3{3, nullptr}, n2{2, &n3}, n1{1, &n2};
    n3.next = &n1;  // cycle through raw pointers
    auto* r = new Raw{1, &x, &x, &n1, "hello"};
    return r;
}

// A chain of n nodes (chase-raw-pointers makes it n*2 levels deep).
void* make_chain(int n) {
    Node* head = nullptr;
    for (int i = 0; i < n; i++) head = new Node{i, head};
    return head;
}

void* make_rchain(int n) {
    RNode* head = nullptr;
    for (int i = 0; i < n; i++) head = new RNode{head, "x"};
    return head;
}

void* make_uniques(int n) {
    auto* v = new Uniques();
    for (int i = 0; i < n; i++) v->push_back(std::make_unique<int>(i));
    return v;
}

void* make_intptrs(int n) {
    int* a = new int[n]();
    auto* v = new IntPtrs();
    for (int i = 0; i < n; i++) v->push_back(a + i);
    for (int i = n - 1; i >= 0; i--) v->push_back(a + i);
    return v;
}

// Pointers to the same offsets of three consecutive 64 MiB regions (as thread arenas' heaps
// are laid out), each twice: the visited set's home slots of such keys are the same.
void* make_farptrs(int n) {
    const uintptr_t region = uintptr_t(64) << 20;
    auto* block = new char[4 * region];  // mmapped and never touched: no memory used
    uintptr_t base = (reinterpret_cast<uintptr_t>(block) + region - 1) & ~(region - 1);
    auto* v = new IntPtrs();
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++)
            for (uintptr_t r = 0; r < 3; r++) v->push_back(reinterpret_cast<int*>(base + r * region + 64 * i));
    return v;
}

void* make_derived() {
    auto* d = new Derived();
    d->extra = {"a", str(1, 70), str(2, 17)};
    return static_cast<Base*>(d);
}

void* make_holder() {
    auto* d = new Derived();
    d->extra = {str(3, 33)};
    return new Holder{d};
}

void* make_everything() {
    auto* e = new Everything();
    e->i32 = 1;
    for (int i = 0; i < 7; i++) e->elems[i] = Elem{i, str(i, i * 5), 'x'};
    e->names = {"a", str(1, 20), ""};
    e->tup = {str(2, 30), 3, std::vector<int>(4)};
    for (int i = 0; i < 20; i++) e->mm.insert({i % 3, str(i, i)});
    for (int i = 0; i < 20; i++) e->ms.insert(str(i % 5, 18));
    for (int i = 0; i < 20; i++) e->umm.insert({i % 4, std::vector<int>(i)});
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < i; j++) e->nested_maps[i][str(j, 16 + j)] = {1, 2, j};
    for (int i = 0; i < 4; i++) e->dd.push_back(std::deque<int>(i * 200, i));
    for (int i = 0; i < 3; i++) e->lv.push_back(Strings(i + 1, str(i, 25)));
    e->ov = Strings{"x", str(4, 44)};
    e->var = std::map<int, int>{{1, 2}, {3, 4}};
    e->arr.reset(new int[10]);
    e->self.reset(new Everything());
    e->self->var = str(5, 55);
    e->pairs = {{1, "a"}, {2, str(3, 33)}};
    e->by_pair[{1, 2}] = 3;
    return e;
}

void* make_smalls(int n) {
    auto* s = new Smalls();
    for (int i = 0; i < 3; i++) s->few.push(i);
    for (int i = 0; i < n; i++) s->many.push(i);
    for (int i = 0; i < n; i++) s->strs.push(str(i, i % 40));
    s->nested.resize(n % 7);
    for (size_t i = 0; i < s->nested.size(); i++)
        for (size_t j = 0; j < i; j++) s->nested[i].push(long(j));
    return s;
}

void* make_owned(int n) {
    auto* o = new OwnedPtrs{new std::string*[n + 3], uint64_t(n), uint64_t(n + 3)};
    for (int i = 0; i < n; i++) o->items[i] = new std::string(str(i, i % 40));
    return o;
}

void* make_swisses(int n) {
    auto* w = new Swisses();
    fill_swiss(w->s, n, [](int j) { return str(j, j % 5 == 4 ? 40 + j : j % 12); });
    fill_swiss(w->l, n, [](int j) { return long(j); });
    uint64_t groups = 2 * uint64_t(n) / 15 + 1;
    uint64_t c = groups * 15;
    auto* block = static_cast<unsigned char*>(::operator new(groups * 16 + c * sizeof(std::string)));
    w->g = Grouped<std::string>{block, reinterpret_cast<std::string*>(block + groups * 16),
                                uint64_t(n), c};
    for (uint64_t i = 0; i < groups * 16; i++) block[i] = i % 16 == 15 ? 0 : 0x80;
    for (int j = 0; j < n; j++) {
        uint64_t at = 2 * uint64_t(j);
        block[at / 15 * 16 + at % 15] = uint8_t(j & 0x7f);
        new (w->g.slots_ + at) std::string(str(j, j % 3 ? 3 : 50 + j));
    }
    return w;
}

static std::string chains_default;

void* make_chains(int n) {
    auto* c = new Chains();
    fill_chains(c->m, n, [](int j) { return Pair<long, std::string>{j, str(j, j % 3 ? 4 : 30 + j)}; });
    fill_chains(c->ints, n, [](int j) { return Pair<int, long>{j, 2L * j}; });
    c->owned.ptr_ = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(new std::string(str(n, 20 + n))) | 2);
    c->shared.ptr_ = &chains_default;
    c->null.ptr_ = nullptr;
    c->part = new Part();
    c->part->name = str(n, 25);
    c->no_part = nullptr;
    c->not_owned = &chains_default;
    return c;
}

// n nodes, node j in bucket j % B (B = 8, or the power of two ≥ n / 2); the nodes of
// buckets 0, 1, B-2 and B-1 in the two pairs' trees, the others chained newest first.
void* make_tree_chains(int n) {
    using Node = Chained<long, std::string>::Node;
    auto* c = new TreeChains();
    fill_chains(c->empty, 0, [](int) { return Pair<long, std::string>{}; });
    auto& m = c->m;
    uint64_t b = 8;
    while (b < uint64_t(n) / 2) b *= 2;
    m.size_ = uint64_t(n);
    m.buckets_ = b;
    m.table_ = new void*[b]();
    NodeTree* trees[2] = {nullptr, nullptr};
    for (int j = 0; j < n; j++) {
        uint64_t at = uint64_t(j) % b;
        auto* node = new Node{{j, str(j, j % 3 ? 4 : 30 + j)}, nullptr};
        int pair = at < 2 ? 0 : at >= b - 2 ? 1 : -1;
        if (pair < 0) {
            node->next = static_cast<Node*>(m.table_[at]);
            m.table_[at] = node;
            continue;
        }
        if (!trees[pair]) trees[pair] = new NodeTree();
        (*trees[pair])[j] = node;
        m.table_[at & ~uint64_t(1)] = m.table_[at | 1] = trees[pair];
    }
    return c;
}

void* make_ints(int n) {
    auto* v = new std::vector<int>(n, 1);
    return v;
}

void* make_big_imap(int n) {
    auto* m = new IMap();
    for (int i = 0; i < n; i++) (*m)[i] = str(i, i % 30);
    return m;
}

void* make_big_umap(int n) {
    auto* m = new UMap();
    m->reserve(n);
    for (int i = 0; i < n; i++) (*m)[std::to_string(i)] = str(i, i % 30);
    return m;
}

// The pause bench's map (`bench_target pause mapstr`): "value number i on the heap", its
// first node at `offset` mod 128 (nodes and string buffers alternate 128 bytes apart; the
// bench pins 48) when a few one-node probe maps can move it there; for tests.rs's
// `map_walk_cost`.
void* make_bench_map(int n, int offset, int shuffled) {
    // Keys in order (nodes in key order in memory, as the bench's) or shuffled by a fixed
    // seed (nodes in no order: no stride to follow).
    std::vector<int> keys(n);
    for (int i = 0; i < n; i++) keys[i] = i;
    uint64_t x = 0x9e3779b97f4a7c15;
    for (int i = n - 1; shuffled && i > 0; i--) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        std::swap(keys[i], keys[(x >> 33) % (i + 1)]);
    }
    auto fill = [&keys](IMap& m, int n) {
        for (int i = 0; i < n; i++) m[keys[i]] = "value number " + std::to_string(keys[i]) + " on the heap";
    };
    auto at = [](const IMap& m) { return long(reinterpret_cast<uintptr_t>(&*m.begin()) - 32) % 128; };
    static IMap probes[32];
    for (int k = 0; k < 32; k++) {
        fill(probes[k], 1);
        if (at(probes[k]) == offset) {
            probes[k].clear();
            break;
        }
        (void)std::malloc(136);
    }
    auto* m = new IMap();
    fill(*m, n);
    return m;
}

long bench_map_offset(const void* p) {
    auto& m = *static_cast<const IMap*>(p);
    return long(reinterpret_cast<uintptr_t>(&*m.begin()) - 32) % 128;
}

// The bench fixture's own walk of that map.
size_t native_walk_bench_map(const void* p) {
    auto& m = *static_cast<const IMap*>(p);
    size_t s = sizeof m;
    for (auto& [k, v] : m) s += 48 + v.capacity();
    return s;
}

uint64_t native_imap(void* p) {
    uint64_t sum = 0;
    for (auto& [k, v] : *static_cast<IMap*>(p)) sum += k + v.capacity();
    return sum;
}

uint64_t native_umap(void* p) {
    uint64_t sum = 0;
    for (auto& [k, v] : *static_cast<UMap*>(p)) sum += k.capacity() + v.capacity();
    return sum;
}

// The plain C++ walk the benchmark compares with: what a program would do to sum the
// footprint of its own vector<string>.
uint64_t native_sum(void* p) {
    auto* v = static_cast<Strings*>(p);
    uint64_t sum = 0;
    for (auto& s : *v) sum += s.capacity() + s.size();
    return sum;
}
}
