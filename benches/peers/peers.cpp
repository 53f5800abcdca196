// The peers of `taskring-bench peers`: the B3 patterns (crates/taskring-bench/src/bench/overhead.rs)
// run by oneTBB flow_graph and by OpenMP tasks with depend clauses, each with empty task
// bodies, printing one machine-readable line per timed sample.
//
// usage: peers PATTERN SIZE MODE REPS [THREADS [WARMUP]]
//        peers check [THREADS]
//
//   PATTERN  independent | chain | fanout | fanin | wavefront
//   SIZE     independent, chain: tasks (200000); fanout: BLOCKSxK (100x1000: BLOCKS
//            producers with K consumers each); fanin: trees (30 radix-15 trees of 3375
//            leaves); wavefront: GRIDSxRxC (25x64x64)
//   MODE     tbb_build     a flow_graph of continue_nodes built, run and destroyed in
//                          every sample (all three timed);
//            tbb_prebuilt  the same graph built once (untimed), each sample puts the roots
//                          and waits (the graph re-arms itself);
//            omp           one `omp parallel` + `omp single` whose thread creates the
//                          tasks in submission order with `depend` clauses on one byte per
//                          task (chain: `inout` on one variable), all of them timed
//   REPS     timed samples, after WARMUP (default 2) untimed runs of the same kind
//   THREADS  threads of the runtime, the calling thread included (default 2): oneTBB
//            through global_control(max_allowed_parallelism) and a task_arena of that
//            many slots, OpenMP through num_threads
//
// Each sample prints
//   sample pattern=P mode=M threads=T tasks=N edges=E ns_per_task=X build_ns_per_task=B
//          run_ns_per_task=R teardown_ns_per_task=D
// (build and teardown are 0 where the mode has none), after a line
//   peers pattern=P mode=M threads=T tasks=N edges=E build_once_ns_per_task=B
// Every run is checked outside its timing: each task ran. `check` runs every pattern at a
// small size in every mode, each task checking that its predecessors had finished when it
// started (and one in 8 spinning 20 µs to shake the order); it prints a line per pattern
// and "check ok", or what went wrong and exits 1.

#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace {

using clk = std::chrono::steady_clock;
namespace flow = oneapi::tbb::flow;

constexpr uint32_t RADIX = 15;
constexpr uint32_t LEAVES = RADIX * RADIX * RADIX;

struct Pattern {
    std::string name;
    uint64_t a = 0, b = 0, c = 0;  // the SIZE fields
    uint64_t tasks = 0;
};

// Tasks of one radix-15 tree: 3375 + 225 + 15 + 1.
uint64_t tree_tasks() {
    uint64_t n = 0;
    for (uint64_t level = LEAVES; level > 1; level = (level + RADIX - 1) / RADIX) n += level;
    return n + 1;
}

// Calls f(id, preds, npreds) for every task in B3's submission order; ids are 0..tasks-1
// in that order and every predecessor has a smaller id.
template <class F>
void visit(const Pattern& p, F&& f) {
    uint32_t id = 0;
    if (p.name == "independent") {
        for (uint64_t i = 0; i < p.a; i++) f(id++, nullptr, 0);
    } else if (p.name == "chain") {
        for (uint64_t i = 0; i < p.a; i++) {
            uint32_t prev = id - 1;
            f(id++, &prev, i > 0 ? 1 : 0);
        }
    } else if (p.name == "fanout") {
        for (uint64_t blk = 0; blk < p.a; blk++) {
            uint32_t producer = id;
            f(id++, nullptr, 0);
            for (uint64_t k = 0; k < p.b; k++) f(id++, &producer, 1);
        }
    } else if (p.name == "fanin") {
        std::vector<uint32_t> level, next;
        for (uint64_t t = 0; t < p.a; t++) {
            level.clear();
            for (uint32_t i = 0; i < LEAVES; i++) {
                level.push_back(id);
                f(id++, nullptr, 0);
            }
            while (level.size() > 1) {
                next.clear();
                for (size_t s = 0; s < level.size(); s += RADIX) {
                    size_t m = std::min<size_t>(RADIX, level.size() - s);
                    next.push_back(id);
                    f(id++, &level[s], static_cast<int>(m));
                }
                level.swap(next);
            }
        }
    } else if (p.name == "wavefront") {
        const uint64_t r = p.b, c = p.c;
        for (uint64_t g = 0; g < p.a; g++) {
            const uint32_t base = id;
            for (uint64_t i = 0; i < r; i++) {
                for (uint64_t j = 0; j < c; j++) {
                    uint32_t preds[2];
                    int np = 0;
                    if (i > 0) preds[np++] = base + static_cast<uint32_t>((i - 1) * c + j);
                    if (j > 0) preds[np++] = base + static_cast<uint32_t>(i * c + j - 1);
                    f(id++, preds, np);
                }
            }
        }
    }
}

bool parse(const std::string& name, const std::string& size, Pattern* p) {
    p->name = name;
    uint64_t v[3] = {0, 0, 0};
    int n = 0;
    const char* s = size.c_str();
    while (*s && n < 3) {
        char* end = nullptr;
        v[n++] = std::strtoull(s, &end, 10);
        if (end == s) return false;
        s = end;
        if (*s == 'x') s++;
        else if (*s) return false;
    }
    p->a = v[0];
    p->b = v[1];
    p->c = v[2];
    if (name == "independent" || name == "chain") {
        if (n != 1) return false;
        p->tasks = p->a;
    } else if (name == "fanout") {
        if (n != 2) return false;
        p->tasks = p->a * (p->b + 1);
    } else if (name == "fanin") {
        if (n != 1) return false;
        p->tasks = p->a * tree_tasks();
    } else if (name == "wavefront") {
        if (n != 3) return false;
        p->tasks = p->a * p->b * p->c;
    } else {
        return false;
    }
    return p->tasks > 0 && p->tasks < (1ull << 31);
}

// What the task bodies touch: a byte per task, set by the task itself. In `check` mode a
// task first checks that each of its predecessors has set its byte (CSR lists of them
// below), then one task in 8 spins for 20 µs, so a missing dependency shows.
std::vector<uint8_t> g_done;
bool g_check = false;
std::vector<uint32_t> g_pred_off, g_preds;
std::atomic<uint64_t> g_violations{0};

void check_preds(uint32_t id) {
    for (uint32_t k = g_pred_off[id]; k < g_pred_off[id + 1]; k++) {
        if (!__atomic_load_n(&g_done[g_preds[k]], __ATOMIC_ACQUIRE)) {
            g_violations.fetch_add(1, std::memory_order_relaxed);
        }
    }
    if ((id * 2654435761u) >> 29 == 0) {
        auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
        while (std::chrono::steady_clock::now() < until) {
        }
    }
}

inline void body(uint32_t id) {
    if (g_check) check_preds(id);
    __atomic_store_n(&g_done[id], 1, __ATOMIC_RELEASE);
}

// Each task ran (a task that ran twice cannot be told apart from once, but then another
// would be missing: flow_graph and OpenMP run one task per node and per construct) and,
// checking, none started before a predecessor had finished; clears the marks.
bool all_done(const Pattern& p, const char* mode) {
    uint64_t n = 0;
    for (auto& d : g_done) {
        n += d;
        d = 0;
    }
    if (n != p.tasks) {
        std::fprintf(stderr, "peers: %s %s: %llu of %llu tasks ran\n", p.name.c_str(), mode,
                     static_cast<unsigned long long>(n), static_cast<unsigned long long>(p.tasks));
        return false;
    }
    if (uint64_t v = g_violations.exchange(0)) {
        std::fprintf(stderr, "peers: %s %s: %llu tasks started before a predecessor finished\n",
                     p.name.c_str(), mode, static_cast<unsigned long long>(v));
        return false;
    }
    return true;
}

double ns_since(clk::time_point t0, clk::time_point t1) {
    return std::chrono::duration<double, std::nano>(t1 - t0).count();
}

struct Times {
    double build = 0, run = 0, teardown = 0;
    double total() const { return build + run + teardown; }
};

// ---- oneTBB flow_graph -------------------------------------------------------------

using Node = flow::continue_node<flow::continue_msg>;

struct Body {
    uint32_t id;
    void operator()(const flow::continue_msg&) const { body(id); }
};

// A flow graph of one pattern: a continue_node per task (in one allocation), an edge per
// dependency, and the tasks without predecessors to put.
struct TbbGraph {
    flow::graph g;
    Node* nodes = nullptr;
    uint64_t n = 0;
    std::vector<uint32_t> roots;

    explicit TbbGraph(const Pattern& p) : n(p.tasks) {
        nodes = static_cast<Node*>(::operator new(sizeof(Node) * n));
        visit(p, [&](uint32_t id, const uint32_t* preds, int np) {
            new (&nodes[id]) Node(g, Body{id});
            for (int k = 0; k < np; k++) flow::make_edge(nodes[preds[k]], nodes[id]);
            if (np == 0) roots.push_back(id);
        });
    }
    void run() {
        for (uint32_t r : roots) nodes[r].try_put(flow::continue_msg());
        g.wait_for_all();
    }
    ~TbbGraph() {
        for (uint64_t i = n; i > 0; i--) nodes[i - 1].~Node();
        ::operator delete(nodes);
    }
};

Times tbb_build(const Pattern& p) {
    Times t;
    auto t0 = clk::now();
    auto* graph = new TbbGraph(p);
    auto t1 = clk::now();
    graph->run();
    auto t2 = clk::now();
    delete graph;
    auto t3 = clk::now();
    t.build = ns_since(t0, t1);
    t.run = ns_since(t1, t2);
    t.teardown = ns_since(t2, t3);
    return t;
}

Times tbb_rerun(TbbGraph& graph) {
    Times t;
    auto t0 = clk::now();
    graph.run();
    t.run = ns_since(t0, clk::now());
    return t;
}

// ---- OpenMP task depend ------------------------------------------------------------

// One byte per task for the depend clauses (chain: one variable, as B3's INOUT tensor).
std::vector<char> g_cell;
char g_chain_var;

void omp_tasks(const Pattern& p) {
    char* cell = g_cell.data();
    if (p.name == "independent") {
        for (uint32_t i = 0; i < p.a; i++) {
#pragma omp task firstprivate(i)
            body(i);
        }
    } else if (p.name == "chain") {
        for (uint32_t i = 0; i < p.a; i++) {
#pragma omp task firstprivate(i) depend(inout : g_chain_var)
            body(i);
        }
    } else if (p.name == "fanout") {
        uint32_t id = 0;
        for (uint64_t blk = 0; blk < p.a; blk++) {
            const uint32_t producer = id++;
#pragma omp task firstprivate(producer) depend(out : cell[producer])
            body(producer);
            for (uint64_t k = 0; k < p.b; k++) {
                const uint32_t me = id++;
#pragma omp task firstprivate(me) depend(in : cell[producer])
                body(me);
            }
        }
    } else if (p.name == "fanin") {
        uint32_t id = 0;
        for (uint64_t t = 0; t < p.a; t++) {
            uint32_t first = id, width = LEAVES;
            for (uint32_t i = 0; i < LEAVES; i++) {
                const uint32_t me = id++;
#pragma omp task firstprivate(me) depend(out : cell[me])
                body(me);
            }
            // Each level's tasks are numbered consecutively; every chunk has 15 inputs
            // (3375, 225 and 15 are multiples of 15).
            while (width > 1) {
                const uint32_t next_first = id;
                for (uint32_t s = 0; s < width; s += RADIX) {
                    const uint32_t me = id++;
                    [[maybe_unused]] char* in = cell + first + s;
#pragma omp task firstprivate(me) depend(in : in[0], in[1], in[2], in[3], in[4], in[5], in[6], \
                                             in[7], in[8], in[9], in[10], in[11], in[12], in[13], \
                                             in[14]) depend(out : cell[me])
                    body(me);
                }
                first = next_first;
                width /= RADIX;
            }
        }
    } else if (p.name == "wavefront") {
        const uint64_t r = p.b, c = p.c;
        uint32_t id = 0;
        for (uint64_t g = 0; g < p.a; g++) {
            char* base = cell + id;
            for (uint64_t i = 0; i < r; i++) {
                for (uint64_t j = 0; j < c; j++) {
                    const uint32_t me = id++;
                    char* here = base + i * c + j;
                    [[maybe_unused]] char* up = here - c;
                    [[maybe_unused]] char* left = here - 1;
                    if (i > 0 && j > 0) {
#pragma omp task firstprivate(me) depend(in : up[0], left[0]) depend(out : here[0])
                        body(me);
                    } else if (i > 0) {
#pragma omp task firstprivate(me) depend(in : up[0]) depend(out : here[0])
                        body(me);
                    } else if (j > 0) {
#pragma omp task firstprivate(me) depend(in : left[0]) depend(out : here[0])
                        body(me);
                    } else {
#pragma omp task firstprivate(me) depend(out : here[0])
                        body(me);
                    }
                }
            }
        }
    }
}

Times omp_run(const Pattern& p, int threads) {
    Times t;
    auto t0 = clk::now();
#pragma omp parallel num_threads(threads)
#pragma omp single
    omp_tasks(p);
    t.run = ns_since(t0, clk::now());
    return t;
}

uint64_t count_edges(const Pattern& p) {
    uint64_t e = 0;
    visit(p, [&](uint32_t, const uint32_t*, int np) { e += static_cast<uint64_t>(np); });
    return e;
}

// Runs `reps` timed samples of `mode` (after `warmup` untimed runs) and prints them;
// false if a run did not run every task (or, checking, broke an edge).
bool bench(const Pattern& p, const std::string& mode, int reps, int threads, int warmup,
           bool print) {
    g_done.assign(p.tasks, 0);
    if (g_check) {
        g_pred_off.assign(1, 0);
        g_preds.clear();
        visit(p, [&](uint32_t, const uint32_t* preds, int np) {
            g_preds.insert(g_preds.end(), preds, preds + np);
            g_pred_off.push_back(static_cast<uint32_t>(g_preds.size()));
        });
    }
    g_cell.assign(p.tasks, 0);
    const uint64_t edges = count_edges(p);
    const double n = static_cast<double>(p.tasks);
    std::vector<Times> samples;
    double build_once = 0;
    const char* m = mode.c_str();
    auto finish = [&](const Times& t, bool keep) {
        if (!all_done(p, m)) return false;
        if (keep) samples.push_back(t);
        return true;
    };
    if (mode == "omp") {
        for (int i = 0; i < warmup + reps; i++) {
            Times t = omp_run(p, threads);
            if (!finish(t, i >= warmup)) return false;
        }
    } else if (mode == "tbb_build" || mode == "tbb_prebuilt") {
        oneapi::tbb::global_control gc(oneapi::tbb::global_control::max_allowed_parallelism,
                                       static_cast<size_t>(threads));
        oneapi::tbb::task_arena arena(threads);
        bool ok = true;
        arena.execute([&] {
            if (mode == "tbb_build") {
                for (int i = 0; i < warmup + reps && ok; i++) {
                    ok = finish(tbb_build(p), i >= warmup);
                }
                return;
            }
            auto t0 = clk::now();
            TbbGraph graph(p);
            build_once = ns_since(t0, clk::now());
            for (int i = 0; i < warmup + reps && ok; i++) {
                ok = finish(tbb_rerun(graph), i >= warmup);
            }
        });
        if (!ok) return false;
    } else {
        std::fprintf(stderr, "peers: unknown mode '%s' (tbb_build, tbb_prebuilt, omp)\n", m);
        return false;
    }
    if (!print) return true;
    std::printf("peers pattern=%s mode=%s threads=%d tasks=%llu edges=%llu "
                "build_once_ns_per_task=%.2f\n",
                p.name.c_str(), m, threads, static_cast<unsigned long long>(p.tasks),
                static_cast<unsigned long long>(edges), build_once / n);
    for (const Times& t : samples) {
        std::printf("sample pattern=%s mode=%s threads=%d tasks=%llu edges=%llu ns_per_task=%.2f "
                    "build_ns_per_task=%.2f run_ns_per_task=%.2f teardown_ns_per_task=%.2f\n",
                    p.name.c_str(), m, threads, static_cast<unsigned long long>(p.tasks),
                    static_cast<unsigned long long>(edges), t.total() / n, t.build / n, t.run / n,
                    t.teardown / n);
    }
    std::fflush(stdout);
    return true;
}

int check(int threads) {
    g_check = true;
    const char* cases[][2] = {{"independent", "2500"},   {"chain", "2500"}, {"fanout", "3x50"},
                              {"fanin", "2"},            {"wavefront", "2x7x9"}};
    for (auto& c : cases) {
        Pattern p;
        if (!parse(c[0], c[1], &p)) return 2;
        for (const char* mode : {"tbb_build", "tbb_prebuilt", "omp"}) {
            if (!bench(p, mode, 3, threads, 1, false)) return 1;
        }
        std::printf("check %s %s: tasks=%llu edges=%llu ok\n", c[0], c[1],
                    static_cast<unsigned long long>(p.tasks),
                    static_cast<unsigned long long>(count_edges(p)));
    }
    std::printf("check ok\n");
    return 0;
}

int usage() {
    std::fprintf(stderr,
                 "usage: peers PATTERN SIZE MODE REPS [THREADS [WARMUP]]\n"
                 "       peers check [THREADS]\n"
                 "PATTERN: independent N | chain N | fanout BLOCKSxK | fanin TREES | "
                 "wavefront GRIDSxRxC; MODE: tbb_build | tbb_prebuilt | omp\n");
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc >= 2 && std::strcmp(argv[1], "check") == 0) {
        return check(argc >= 3 ? std::atoi(argv[2]) : 2);
    }
    if (argc < 5) return usage();
    Pattern p;
    if (!parse(argv[1], argv[2], &p)) {
        std::fprintf(stderr, "peers: bad pattern or size '%s %s'\n", argv[1], argv[2]);
        return usage();
    }
    const int reps = std::atoi(argv[4]);
    const int threads = argc >= 6 ? std::atoi(argv[5]) : 2;
    const int warmup = argc >= 7 ? std::atoi(argv[6]) : 2;
    if (reps < 1 || threads < 1 || warmup < 0) return usage();
    return bench(p, argv[3], reps, threads, warmup, true) ? 0 : 1;
}
