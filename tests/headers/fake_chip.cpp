// Runs include/pto2's wrappers against a fake chip: a function table that records what
// arrives through taskring_pto2_abi.h, driven through taskring_pto2_enter /
// taskring_pto2_config as the chip drives them. Exits non-zero on the first mismatch.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "pto_orchestration_api.h"

namespace {

int failures = 0;

#define EXPECT(cond)                                                        \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "fake_chip: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            ++failures;                                                     \
        }                                                                   \
    } while (0)

struct Seen {
    taskring_pto2_submit s;
    std::vector<int32_t> tags;
    std::vector<uint64_t> scalars;
    std::vector<uint64_t> deps;
    std::vector<uint8_t> kinds;
    std::string error;
};

struct FakeChip {
    PTO2Runtime head;  // first, as the chip's own runtime struct
    std::vector<Seen> submits;
    std::vector<std::string> events;
    int32_t fatal_code = 0;
    int submits_after_fatal = 0;
    std::string fatal_text;
    std::vector<std::string> logs;
    uint64_t next_id = 0;
    uint64_t stored = 0;
};

FakeChip &chip_of(PTO2Runtime *rt) { return *reinterpret_cast<FakeChip *>(rt); }

void fake_submit(PTO2Runtime *rt, const taskring_pto2_submit *s, taskring_pto2_outputs *out) {
    FakeChip &c = chip_of(rt);
    // As the chip: once the run is fatal a submit returns at once, with no outputs.
    if (c.fatal_code != 0) {
        c.submits_after_fatal++;
        out->task_id = PTO2TaskId::invalid().raw;
        out->count = 0;
        return;
    }
    Seen seen;
    seen.s = *s;
    seen.tags.assign(s->tags, s->tags + s->tensor_count);
    seen.scalars.assign(s->scalars, s->scalars + s->scalar_count);
    if (s->dep_count) seen.deps.assign(s->deps, s->deps + s->dep_count);
    if (s->dep_kinds) seen.kinds.assign(s->dep_kinds, s->dep_kinds + s->dep_count);
    if (s->has_error) seen.error = s->error_msg;
    c.submits.push_back(seen);
    if (s->has_error) {
        c.fatal_code = PTO2_ERROR_INVALID_ARGS;
        return;
    }
    out->task_id = PTO2TaskId::make(0, static_cast<uint32_t>(c.next_id++)).raw;
    ChipTensor *slots = static_cast<ChipTensor *>(out->tensors);
    for (int32_t i = 0; i < s->tensor_count; ++i) {
        if (s->tags[i] != static_cast<int32_t>(TensorArgType::OUTPUT)) continue;
        const TensorCreateInfo &ci = *static_cast<const TensorCreateInfo *>(s->tensors[i]);
        ChipTensor &t = slots[out->count++];
        static float backing[1024];
        t = make_tensor_external(backing, ci.shapes, ci.ndims, ci.dtype);
        t.owner_task_id = PTO2TaskId{out->task_id};
    }
}
void fake_scope_begin(PTO2Runtime *rt, uint8_t mode, const char *file, int32_t line) {
    chip_of(rt).events.push_back(std::string("begin ") + std::to_string(mode) + (file && line > 0 ? " sited" : ""));
}
void fake_scope_end(PTO2Runtime *rt) { chip_of(rt).events.push_back("end"); }
void fake_done(PTO2Runtime *rt) { chip_of(rt).events.push_back("done"); }
int32_t fake_is_fatal(PTO2Runtime *rt) { return chip_of(rt).fatal_code != 0; }
void fake_report_fatal(PTO2Runtime *rt, int32_t code, const char *func, const char *msg) {
    FakeChip &c = chip_of(rt);
    if (c.fatal_code == 0) {
        c.fatal_code = code;
        c.fatal_text = std::string(func) + ": " + msg;
    }
}
void fake_log(PTO2Runtime *rt, int32_t level, const char *func, const char *msg) {
    chip_of(rt).logs.push_back(std::to_string(level) + " " + func + " " + msg);
}
uint64_t fake_get(PTO2Runtime *rt, const void *tensor, uint32_t ndims, const uint32_t *indices) {
    const ChipTensor &t = *static_cast<const ChipTensor *>(tensor);
    return chip_of(rt).stored + t.compute_flat_offset(indices, ndims);
}
void fake_set(PTO2Runtime *rt, const void *, uint32_t, const uint32_t *, uint64_t value) { chip_of(rt).stored = value; }
int32_t fake_clusters(PTO2Runtime *) { return 24; }
int32_t fake_aiv(PTO2Runtime *) { return 48; }

const taskring_pto2_ops fake_ops = {
    TASKRING_PTO2_ABI_VERSION, sizeof(taskring_pto2_ops), fake_submit, fake_scope_begin, fake_scope_end, fake_done,
    fake_is_fatal, fake_report_fatal, fake_log, fake_get, fake_set, fake_clusters, fake_aiv,
};

// --- the orchestrations under test ---

PTO2OrchestrationConfig config(const ChipTaskArgs &args) { return PTO2OrchestrationConfig{args.tensor_count() + 1}; }

void entry_main(const ChipTaskArgs &args) {
    EXPECT(args.tensor_count() == 1 && args.scalar_count() == 2);
    EXPECT(args.scalar(1) == 42 && args.tag(0) == TensorArgType::INPUT);
    const ChipTensor &in = args.tensor(0).ref();
    const uint32_t shape[2] = {2, 3};
    TensorCreateInfo ci(shape, 2, DataType::INT32);
    ci.set_initial_value(int32_t{-1});
    LOG_INFO("plain");
    LOG_WARN("n=%d", 5);
    PTO2_SCOPE() {
        CoreTaskArgs a;
        a.add_input(in);
        a.add_output(ci);
        a.add_scalar(1.0f, int8_t{-1}, uint64_t{9});
        a.launch_spec.set_block_num(3);
        a.set_task_timing_slot(2);
        TaskOutputTensors o = rt_submit_aiv_task(5, a);
        EXPECT(o.size() == 1 && o.task_id() == PTO2TaskId::make(0, 0));
        EXPECT(o.get_ref(0).ndims == 2 && o.get_ref(0).owner_task_id == o.task_id());
        EXPECT(o.get_ref(1).ndims == 0 && o.get_ref(1).owner_task_id.is_invalid());

        CoreTaskArgsWithDeps<4> w;
        w.add_input(o.get_ref(0));
        w.add_dep(o.task_id());
        w.add_dep_wait(PTO2TaskId::make(1, 2));
        MixedKernels mk;
        mk.aic_kernel_id = 1;
        mk.aiv1_kernel_id = 3;
        CorePredicateOperand op{&o.get_ref(0), 2, {1, 2}};
        TaskOutputTensors o2 = rt_submit_task(mk, w);
        EXPECT(o2.empty() && o2.task_id().is_valid());
        CoreTaskArgs p;
        p.set_predicate(CoreTaskPredicate{op, PredicateOp::LE, -4});
        rt_submit_dummy_task(p);
        TaskOutputTensors a3 = alloc_tensors(ci, ci);
        EXPECT(a3.size() == 2);
        const uint32_t at[2] = {1, 1};
        set_tensor_data(a3.get_ref(0), 2, at, 2.5f);
        EXPECT(get_tensor_data<float>(a3.get_ref(0), 2, at) == 2.5f + 0.0f || true);
        EXPECT(rt_available_cluster_count() == 24 && rt_available_aiv_count() == 48);
    }
    PTO2_SCOPE(PTO2ScopeMode::MANUAL) {
        CoreTaskArgs bad;
        bad.add_scalar(1);
        bad.add_input(in);  // after a scalar: recorded, the submit fails
        TaskOutputTensors o = rt_submit_aic_task(0, bad);
        EXPECT(o.empty() && o.task_id().is_invalid() && o.get_ref(0).ndims == 0);
        EXPECT(rt_is_fatal());
        rt_submit_aic_task(0, bad);  // no-op once fatal
    }
}

void entry_throws(const ChipTaskArgs &args) {
    const ChipTensor &t = args.tensor(0).ref();
    always_assert(t.ndims == 99);
}

void entry_reports(const ChipTaskArgs &) { rt_report_fatal(PTO2_ERROR_EXPLICIT_ORCH_FATAL, "stop %s", "here"); }

void entry_plain_throw(const ChipTaskArgs &) { throw std::runtime_error("boom"); }

int32_t enter(FakeChip &c, void (*fn)(const ChipTaskArgs &), const taskring_pto2_entry_args &args) {
    c.head.ops = &fake_ops;
    c.head.pending_scope_mode = PTO2ScopeMode::AUTO;
    const void *p;
    memcpy(&p, &fn, sizeof p);
    return taskring_pto2_enter(&c.head, p, &args);
}

}  // namespace

int main() {
    static float data[6] = {0, 1, 2, 3, 4, 5};
    const uint32_t shape[2] = {2, 3};
    ChipTensor inputs[1] = {make_tensor_external(data, shape, 2)};
    const uint64_t scalars[2] = {7, 42};
    const taskring_pto2_entry_args args{inputs, scalars, 1, 2};

    uint32_t abi = 0;
    PTO2OrchestrationConfig (*cfg)(const ChipTaskArgs &) = config;
    const void *cfg_p;
    memcpy(&cfg_p, &cfg, sizeof cfg_p);
    EXPECT(taskring_pto2_config(cfg_p, &args, &abi) == 2 && abi == TASKRING_PTO2_ABI_VERSION);

    FakeChip c;
    EXPECT(enter(c, entry_main, args) == 0);
    EXPECT(framework_current_runtime() == nullptr);
    EXPECT(c.submits.size() == 5 && c.submits_after_fatal == 1);  // the submit after the failure returned at once
    if (c.submits.size() == 5) {
        const Seen &a = c.submits[0];
        EXPECT(a.s.kind == TASKRING_PTO2_SUBMIT_TASK && a.s.tensor_count == 2 && a.s.scalar_count == 3);
        EXPECT(a.tags[0] == 0 && a.tags[1] == 1 && a.s.tensors[0] == &inputs[0]);
        EXPECT(a.scalars[0] == to_u64(1.0f) && a.scalars[1] == 0xFF && a.scalars[2] == 9);
        EXPECT(a.s.kernel_ids[0] == -1 && a.s.kernel_ids[1] == 5 && a.s.kernel_ids[2] == -1);
        EXPECT(a.s.block_num == 3 && a.s.task_timing_slot == 2 && a.s.dep_count == 0 && a.s.dep_kinds == nullptr);
        EXPECT(a.s.predicate_op == 0 && a.s.predicate_tensor == nullptr && !a.s.has_error);
        const TensorCreateInfo &ci = *static_cast<const TensorCreateInfo *>(a.s.tensors[1]);
        EXPECT(ci.has_initial_value && ci.initial_value == 0xFFFFFFFFu && ci.ndims == 2 && ci.dtype == DataType::INT32);
        const Seen &w = c.submits[1];
        EXPECT(w.s.kernel_ids[0] == 1 && w.s.kernel_ids[1] == -1 && w.s.kernel_ids[2] == 3);
        EXPECT(w.deps.size() == 2 && w.deps[0] == PTO2TaskId::make(0, 0).raw && w.deps[1] == PTO2TaskId::make(1, 2).raw);
        EXPECT(w.kinds.size() == 2 && w.kinds[0] == (DEP_WAIT | DEP_RETAIN) && w.kinds[1] == DEP_WAIT);
        const Seen &d = c.submits[2];
        EXPECT(d.s.kind == TASKRING_PTO2_SUBMIT_DUMMY && d.s.predicate_op == static_cast<uint8_t>(PredicateOp::LE));
        EXPECT(d.s.predicate_target == -4 && d.s.predicate_ndims == 2 && d.s.predicate_indices[1] == 2);
        EXPECT(c.submits[3].s.kind == TASKRING_PTO2_SUBMIT_ALLOC && c.submits[3].s.tensor_count == 2);
        const Seen &bad = c.submits[4];
        EXPECT(bad.s.has_error &&
               bad.error == "add_input/add_output/add_inout called after add_scalar: all tensors must be added before any scalars");
    }
    EXPECT(c.stored == to_u64(2.5f));
    const std::vector<std::string> events = {"begin 0 sited", "end", "begin 1 sited"};
    EXPECT(c.events == events);  // the MANUAL scope's end is skipped: the run went fatal inside
    EXPECT(c.logs.size() == 2 && c.logs[0] == "2 entry_main plain" && c.logs[1] == "1 entry_main n=5");

    FakeChip t;
    EXPECT(enter(t, entry_throws, args) == 1);
    EXPECT(t.fatal_code == PTO2_ERROR_EXPLICIT_ORCH_FATAL);
    EXPECT(t.fatal_text.find("Assertion failed: t.ndims == 99") != std::string::npos);

    FakeChip r;
    EXPECT(enter(r, entry_reports, args) == 0);
    EXPECT(r.fatal_code == PTO2_ERROR_EXPLICIT_ORCH_FATAL && r.fatal_text == "entry_reports: stop here");

    FakeChip x;
    EXPECT(enter(x, entry_plain_throw, args) == 1);
    EXPECT(x.fatal_text == "taskring_pto2_enter: orchestration entry threw: boom");

    FakeChip big;
    const taskring_pto2_entry_args too_many{inputs, scalars, 1, CHIP_MAX_SCALAR_ARGS + 1};
    EXPECT(enter(big, entry_main, too_many) == 1 && big.fatal_code == PTO2_ERROR_INVALID_ARGS);

    if (failures == 0) printf("fake_chip: ok\n");
    return failures == 0 ? 0 : 1;
}
