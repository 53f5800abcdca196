//! The orchestrator waiting for one task to complete: what reading or writing tensor
//! data from the orchestration needs (`get_tensor_data` / `set_tensor_data` of the PTO2
//! API, [`crate::pto2`]). The wait helps as a ring wait does, and ends with the run's
//! failure, or with TENSOR_WAIT_TIMEOUT once nothing completed, ran or was ready for the
//! backstop (SCHEDULER_TIMEOUT when tasks ran but none completed).

use super::capacity::{Backstop, Verdict};
use super::*;

impl Orchestrator<'_> {
    /// Block until task `id` of this run has completed. `what` names the access in the
    /// failure (`"get_tensor_data"`).
    pub fn wait_task(&mut self, id: TaskId, what: &str) -> Result<(), RuntimeFailure> {
        self.wait_on(id, what, false)
    }

    /// Block until task `id` has completed and every consumer that retains it (a task
    /// that reads its outputs through the creator edge) has finished: what a write into
    /// `id`'s outputs from the orchestration waits for (`set_tensor_data`).
    pub fn wait_consumers(&mut self, id: TaskId, what: &str) -> Result<(), RuntimeFailure> {
        self.wait_on(id, what, true)
    }

    fn wait_on(&mut self, id: TaskId, what: &str, consumers: bool) -> Result<(), RuntimeFailure> {
        self.check_fatal()?;
        let sh = self.sh;
        let done = move || {
            if consumers {
                sh.consumers_done(id)
            } else {
                sh.is_completed(id)
            }
        };
        if !id.is_valid() || done() {
            return Ok(());
        }
        let mut clock = Backstop::new();
        loop {
            if done() {
                return Ok(());
            }
            self.check_fatal()?;
            match clock.check(self) {
                Verdict::Wait => {}
                Verdict::Deadlock => {
                    return Err(self.fail(RuntimeFailure::new(
                        StatusCode::TensorWaitTimeout,
                        Some(id.ring()),
                        format!(
                            "{what}: {} (ring={}, local={}) not done: nothing ran, completed \
                             or was ready for {:?}",
                            if consumers {
                                "consumers of producer"
                            } else {
                                "producer"
                            },
                            id.ring(),
                            id.local(),
                            self.policy.backstop
                        ),
                    )))
                }
                Verdict::Stalled(f) => return Err(self.fail(f)),
            }
            self.pay_wakes();
            let moved = || self.eng.fatal.load(Acquire) || done();
            if moved() || self.probe.help() {
                continue;
            }
            if let Some(h) = self.blocking_hook {
                h(true);
            }
            self.eng
                .progress
                .wait_completion(moved, Duration::from_millis(20).min(self.policy.backstop));
            if let Some(h) = self.blocking_hook {
                h(false);
            }
        }
    }

    /// Has the run failed (a failure is latched)? Every later call returns it.
    pub fn is_fatal(&self) -> bool {
        self.eng.fatal.load(Acquire)
    }

    /// The run's latched failure, if any.
    pub fn failure(&self) -> Option<RuntimeFailure> {
        self.is_fatal().then(|| self.latched_failure())
    }

    /// Fail the run with `f` (the first failure wins); returns the latched one.
    pub fn fail_run(&self, f: RuntimeFailure) -> RuntimeFailure {
        self.fail(f)
    }

    /// The chip's cores this run may use: (AIC, AIV). A core that takes either kind
    /// counts in both; an executor that is no chip (a next level) reports (0, 0).
    pub fn core_counts(&self) -> (usize, usize) {
        self.probe.cores()
    }
}
