//! Runtime failures: status codes, names, descriptions and hints.
//!
//! Codes, names, descriptions and hints follow upstream's `error_names.h` so users can
//! triage with upstream's documentation. Three codes are ours:
//! 200 TASK_FAILED (a kernel raised or panicked), 201 RUNTIME_SETUP (an arena could
//! not be reserved, or the chip is not usable) and 202 DEVICE_OUT_OF_MEMORY (an arena
//! does not fit the chip's device memory). A failure's `description` is the fixed
//! description of its code followed by the specifics of this failure (`; ...`).

use std::fmt;

/// Status codes (upstream's plus ours).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum StatusCode {
    ScopeDeadlock = 1,
    HeapRingDeadlock = 2,
    FlowControlDeadlock = 3,
    DepPoolOverflow = 4,
    InvalidArgs = 5,
    RequireSyncStartInvalid = 7,
    TensorWaitTimeout = 8,
    ExplicitOrchFatal = 9,
    TensormapOverflow = 11,
    SchedulerTimeout = 100,
    TaskFailed = 200,
    RuntimeSetup = 201,
    DeviceOutOfMemory = 202,
}

impl StatusCode {
    pub fn code(self) -> u32 {
        self as u32
    }

    /// The code with upstream's number `n` (`PTO2_ERROR_*`, 200+ taskring's own).
    pub fn from_code(n: u32) -> Option<StatusCode> {
        use StatusCode::*;
        [
            ScopeDeadlock,
            HeapRingDeadlock,
            FlowControlDeadlock,
            DepPoolOverflow,
            InvalidArgs,
            RequireSyncStartInvalid,
            TensorWaitTimeout,
            ExplicitOrchFatal,
            TensormapOverflow,
            SchedulerTimeout,
            TaskFailed,
            RuntimeSetup,
            DeviceOutOfMemory,
        ]
        .into_iter()
        .find(|c| c.code() == n)
    }

    pub fn name(self) -> &'static str {
        match self {
            StatusCode::ScopeDeadlock => "SCOPE_DEADLOCK",
            StatusCode::HeapRingDeadlock => "HEAP_RING_DEADLOCK",
            StatusCode::FlowControlDeadlock => "FLOW_CONTROL_DEADLOCK",
            StatusCode::DepPoolOverflow => "DEP_POOL_OVERFLOW",
            StatusCode::InvalidArgs => "INVALID_ARGS",
            StatusCode::RequireSyncStartInvalid => "REQUIRE_SYNC_START_INVALID",
            StatusCode::TensorWaitTimeout => "TENSOR_WAIT_TIMEOUT",
            StatusCode::ExplicitOrchFatal => "EXPLICIT_ORCH_FATAL",
            StatusCode::TensormapOverflow => "TENSORMAP_OVERFLOW",
            StatusCode::SchedulerTimeout => "SCHEDULER_TIMEOUT",
            StatusCode::TaskFailed => "TASK_FAILED",
            StatusCode::RuntimeSetup => "RUNTIME_SETUP",
            StatusCode::DeviceOutOfMemory => "DEVICE_OUT_OF_MEMORY",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            StatusCode::ScopeDeadlock => "tasks submitted in one scope reached the ring task-window cap; their fanout references are only released at scope_end, so no slot can be reclaimed",
            StatusCode::HeapRingDeadlock => "the task allocator could not reserve the heap bytes required for another task",
            StatusCode::FlowControlDeadlock => "the task allocator could not admit another task because the configured task window had no available slot",
            StatusCode::DepPoolOverflow => "a task's producer dependencies exceeded the runtime's available fanin representation capacity",
            StatusCode::InvalidArgs => "an orchestration API rejected its arguments (bad alloc_tensors info, illegal nested scope, unknown task id in set_dependencies, or an CoreTaskArgs carrying an error flag)",
            StatusCode::RequireSyncStartInvalid => "a task asked for all its blocks to start at once (require_sync_start) but has more blocks than the chip has cores of its kind",
            StatusCode::TensorWaitTimeout => "waiting for tensor data timed out: the producing task never completed, or a consumer never released its fanout reference",
            StatusCode::ExplicitOrchFatal => "the orchestration code called rt_report_fatal() itself; every later orchestration API call short-circuits to a no-op",
            StatusCode::TensormapOverflow => "the tensormap could not reserve the entries required to register another task's outputs",
            StatusCode::SchedulerTimeout => "the scheduler saw no forward progress within its timeout; the sub_class= line below carries the device-classified reason and locators",
            StatusCode::TaskFailed => "a task's kernel raised an error or panicked; its dependants were not run",
            StatusCode::RuntimeSetup => "the runtime could not set up the chip or the arena for this dispatch",
            StatusCode::DeviceOutOfMemory => "the chip's device memory cannot hold what was asked of it (the arena of a dispatch's ring sizing, or device-resident tensors), even with every idle cached arena evicted",
        }
    }

    pub fn hint(self) -> &'static str {
        match self {
            StatusCode::ScopeDeadlock => "raise ring_task_window (PTO2_RING_TASK_WINDOW) or split the scope so slots are reclaimed sooner; enable CallConfig.enable_scope_stats to see which scope peaked",
            StatusCode::HeapRingDeadlock => "raise ring_heap (PTO2_RING_HEAP) or shrink per-task args / intermediate tensors; the description names the ring's configured ring_heap and the bytes the task asked for",
            StatusCode::FlowControlDeadlock => "raise ring_task_window (PTO2_RING_TASK_WINDOW) or shrink the graph; in a reclaiming runtime also check for nested submission or a stalled consumer",
            StatusCode::DepPoolOverflow => "follow the preceding resource diagnostic: HBG has no spill pool, so reduce fanin to PTO2_MAX_FANIN or less; for a reclaiming runtime raise PTO2_RING_DEP_POOL or cut fanin",
            StatusCode::InvalidArgs => "an orchestration bug, not a capacity problem -- resizing the rings will not help; recheck the arguments of the orchestration API calls listed above",
            StatusCode::RequireSyncStartInvalid => "lower the task's block_num to at most rt_available_cluster_count() (AIC or mixed tasks) or rt_available_aiv_count() (AIV tasks), or drop set_require_sync_start",
            StatusCode::TensorWaitTimeout => "find the producing kernel and check it for a hang (see SCHEDULER_TIMEOUT sub_class S1); verify the consumer declares the dependency and exits; raise PTO2_TENSOR_DATA_TIMEOUT_MS to tell a slow kernel apart from a stuck one",
            StatusCode::ExplicitOrchFatal => "self-inflicted -- follow the message passed to the rt_report_fatal() call site",
            StatusCode::TensormapOverflow => "follow the preceding resource diagnostic: in HBG increase PTO2_TENSORMAP_POOL_SIZE or shrink the graph; in a reclaiming runtime also inspect entry-reclaim progress",
            StatusCode::SchedulerTimeout => "read the description's sub_class= first (when it has one): S1 a kernel that does not return (stuck_task_id, stuck_core), S3 ready tasks no core runs, S4 tasks waiting for dependencies that never complete; raise PTO2_SCHEDULER_TIMEOUT_MS to tell a true deadlock apart from a merely slow kernel",
            StatusCode::TaskFailed => "fix the kernel named above; the chip is intact and the next run proceeds normally",
            StatusCode::RuntimeSetup => "check the sizing (address space for the heaps) and the chip's state",
            StatusCode::DeviceOutOfMemory => "free device memory: give the dispatch a smaller runtime_env (taskring sizing / suggest_sizing derive one from its scope stats), hold fewer or smaller device-resident tensors, or raise device_memory",
        }
    }
}

/// Which ring resource a capacity failure is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Resource {
    TaskWindow,
    Heap,
    DepPool,
    Tensormap,
}

impl Resource {
    pub fn name(self) -> &'static str {
        match self {
            Resource::TaskWindow => "ring_task_window",
            Resource::Heap => "ring_heap",
            Resource::DepPool => "ring_dep_pool",
            Resource::Tensormap => "tensormap",
        }
    }
}

/// A failed run (or a failed submit inside one). See the module doc.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeFailure {
    pub code: StatusCode,
    pub ring: Option<usize>,
    /// The specifics: which call, which task, which kernel, which sizes.
    pub detail: String,
    /// For capacity failures: the resource, the configured size and the size that
    /// would have been needed (when known).
    pub resource: Option<Resource>,
    pub configured: Option<u64>,
    pub needed: Option<u64>,
    /// Where `needed` is unknown: a lower bound of it that the failure saw (what was
    /// live plus the failing submit; the description says it), for callers that grow
    /// the resource (automatic sizing).
    pub at_least: Option<u64>,
}

impl RuntimeFailure {
    pub fn new(code: StatusCode, ring: Option<usize>, detail: impl Into<String>) -> RuntimeFailure {
        RuntimeFailure {
            code,
            ring,
            detail: detail.into(),
            resource: None,
            configured: None,
            needed: None,
            at_least: None,
        }
    }

    /// The TASK_FAILED failure of `task`, whose kernel `kernel` failed with `msg`.
    pub(crate) fn task_failed(
        kernel: &str,
        task: crate::tensor::TaskId,
        msg: &str,
    ) -> RuntimeFailure {
        RuntimeFailure::new(
            StatusCode::TaskFailed,
            Some(task.ring()),
            format!("kernel '{kernel}' failed in task {task:?}: {msg}"),
        )
    }

    /// An INVALID_ARGS failure.
    pub fn invalid_args(ring: Option<usize>, detail: impl Into<String>) -> RuntimeFailure {
        RuntimeFailure::new(StatusCode::InvalidArgs, ring, detail)
    }

    /// A capacity failure with the sizes.
    pub fn capacity(
        code: StatusCode,
        ring: usize,
        resource: Resource,
        configured: u64,
        needed: Option<u64>,
        detail: impl Into<String>,
    ) -> RuntimeFailure {
        RuntimeFailure {
            code,
            ring: Some(ring),
            detail: detail.into(),
            resource: Some(resource),
            configured: Some(configured),
            needed,
            at_least: None,
        }
    }

    /// This failure with `at_least` (a lower bound of the unknown needed size).
    pub fn with_at_least(mut self, at_least: Option<u64>) -> RuntimeFailure {
        self.at_least = at_least;
        self
    }

    pub fn name(&self) -> &'static str {
        self.code.name()
    }
    /// The code's hint; for a capacity failure whose needed size is known, led by the
    /// `runtime_env` value that would have held it (e.g. `runtime_env
    /// ring_task_window[1] >= 64; raise ring_task_window ...`); when it is not known,
    /// by the entry to raise and how to learn its size in one run.
    pub fn hint(&self) -> String {
        match (self.resource, self.ring, self.needed, self.configured) {
            (Some(r), Some(ring), Some(n), _) if r != Resource::Tensormap => format!(
                "runtime_env {}[{ring}] >= {n}; {}",
                r.name(),
                self.code.hint()
            ),
            (Some(r), Some(ring), None, Some(c)) if r != Resource::Tensormap => format!(
                "runtime_env {}[{ring}] > {c}; the size that holds the run is not known from this failure: \"auto\" for that entry learns it in one dispatch (or run with enable_scope_stats and use taskring sizing); {}",
                r.name(),
                self.code.hint()
            ),
            _ => self.code.hint().to_string(),
        }
    }
    /// The fixed description of the code followed by this failure's specifics.
    pub fn description(&self) -> String {
        if self.detail.is_empty() {
            self.code.description().to_string()
        } else {
            format!("{}; {}", self.code.description(), self.detail)
        }
    }
}

impl fmt::Display for RuntimeFailure {
    /// `{name} (code {code}) on ring {ring}: {description}. Hint: {hint}`; a failure of
    /// no ring (`ring` None) leaves out ` on ring {ring}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (code {})", self.code.name(), self.code.code())?;
        if let Some(r) = self.ring {
            write!(f, " on ring {r}")?;
        }
        write!(f, ": {}. Hint: {}", self.description(), self.hint())
    }
}

impl std::error::Error for RuntimeFailure {}

impl From<&RuntimeFailure> for crate::dfx::FailureRecord {
    fn from(f: &RuntimeFailure) -> Self {
        crate::dfx::FailureRecord {
            code: f.code.code(),
            name: f.name().to_string(),
            ring: f.ring,
            resource: f.resource.map(|r| r.name().to_string()),
            configured: f.configured,
            needed: f.needed,
            at_least: f.at_least,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_format() {
        let e = RuntimeFailure::capacity(
            StatusCode::ScopeDeadlock,
            1,
            Resource::TaskWindow,
            4,
            Some(9),
            "scope at depth 1 holds 3 tasks",
        );
        let s = e.to_string();
        assert!(s.starts_with("SCOPE_DEADLOCK (code 1) on ring 1: tasks submitted in one scope"));
        assert!(s.contains("; scope at depth 1 holds 3 tasks. Hint: runtime_env ring_task_window[1] >= 9; raise ring_task_window"), "{s}");
        let n = RuntimeFailure::invalid_args(None, "x");
        assert!(n.to_string().starts_with("INVALID_ARGS (code 5): "), "{n}");
    }
}
