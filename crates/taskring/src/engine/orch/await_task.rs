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
        self.check_fatal()?;
        if !id.is_valid() || self.sh.is_completed(id) {
            return Ok(());
        }
        let mut clock = Backstop::new();
        loop {
            if self.sh.is_completed(id) {
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
                            "{what}: producer (ring={}, local={}) not completed: nothing ran, \
                             completed or was ready for {:?}",
                            id.ring(),
                            id.local(),
                            self.policy.backstop
                        ),
                    )))
                }
                Verdict::Stalled(f) => return Err(self.fail(f)),
            }
            self.wait_for_completion(id);
        }
    }

    /// Wait briefly for `id` to complete (or the run to fail).
    fn wait_for_completion(&self, id: TaskId) {
        self.pay_wakes();
        self.wait_until(|| self.eng.fatal.load(Acquire) || self.sh.is_completed(id));
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
