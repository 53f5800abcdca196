//! Scopes: opening and closing them (a scope's end releases what it holds), and the
//! count of a scope that overflows its window ([`DryScope`]): the rest of the scope is
//! counted, not run, so its SCOPE_DEADLOCK can say which window would have held it.

use super::*;

/// The scope-deadlock count in progress (see `Orchestrator::dry`).
pub(super) struct DryScope {
    /// `scopes.len()` while the overflowing scope is the innermost one.
    pub(super) level: usize,
    pub(super) ring: usize,
    pub(super) depth: usize,
    pub(super) window: u64,
    /// Tasks the scope owns so far (submitted, or counted without running).
    pub(super) owned: u64,
    /// Submits seen while counting (the scope's own and those of its inner scopes).
    pub(super) counted: u64,
    /// The submit that overflowed (its text: `submit of kernel 'x'`).
    pub(super) what: String,
}

/// Most submits counted after a SCOPE_DEADLOCK (a program that only stops submitting
/// when a submit fails must not run forever); beyond it `needed` is a lower bound.
pub(super) const DRY_COUNT_LIMIT: u64 = 1 << 20;

impl DryScope {
    /// The SCOPE_DEADLOCK: `complete` when the scope ended (its task count is exact),
    /// else the count so far is a lower bound.
    pub(super) fn failure(&self, complete: bool) -> RuntimeFailure {
        let DryScope {
            ring,
            depth,
            window,
            owned,
            ref what,
            ..
        } = *self;
        let max = crate::config::MAX_RING_TASK_WINDOW;
        // A scope of `owned` tasks needs `owned + 1 <= window - 1` at its last submit.
        let needed = owned
            .saturating_add(1)
            .checked_next_power_of_two()
            .filter(|&n| n <= max);
        let count = if complete {
            format!("the scope at depth {depth} submits {owned} tasks (those beyond the window were counted to the end of the scope, not run)")
        } else {
            format!("the scope at depth {depth} submitted at least {owned} tasks (the rest of the scope was not counted)")
        };
        let fit = match needed {
            Some(n) if complete => format!("a ring_task_window of {n} slots would have held it"),
            Some(n) => format!("a ring_task_window of at least {n} slots is needed"),
            None => format!(
                "no valid ring_task_window (at most {max} slots) holds that many; split the scope"
            ),
        };
        // Only a complete count knows the window that holds the scope.
        RuntimeFailure::capacity(
            StatusCode::ScopeDeadlock,
            ring,
            Resource::TaskWindow,
            window,
            needed.filter(|_| complete),
            format!("{what}: {count} and ring {ring}'s ring_task_window={window} holds at most {} live tasks; {fit}", window - 1),
        )
        .with_at_least(needed.filter(|_| !complete))
    }
}

impl<'r> Orchestrator<'r> {
    // ----- scopes -------------------------------------------------------------------

    /// Open a scope. `manual` scopes infer no dependencies (only explicit ones).
    #[track_caller]
    pub fn begin_scope(&mut self, manual: bool) -> Result<(), RuntimeFailure> {
        let site = if self.st.scopes.is_empty() {
            Site::Root
        } else {
            Site::Code(std::panic::Location::caller())
        };
        self.begin_scope_at(manual, site)
    }

    /// Open a scope whose site (for scope stats) is named by the caller, e.g.
    /// `"model.py:42"`.
    pub fn begin_scope_named(&mut self, manual: bool, site: &str) -> Result<(), RuntimeFailure> {
        let site = if self.st.stats.is_some() {
            self.st.sites.push(site.to_string());
            Site::Named(self.st.sites.len() as u32 - 1)
        } else {
            Site::Root
        };
        self.begin_scope_at(manual, site)
    }

    pub(super) fn begin_scope_at(
        &mut self,
        manual: bool,
        site: Site,
    ) -> Result<(), RuntimeFailure> {
        self.check_fatal()?;
        if !manual && self.in_manual_scope() {
            return Err(self.fail(RuntimeFailure::invalid_args(
                Some(self.current_ring()),
                "scope(): auto scope nested inside manual scope is not supported",
            )));
        }
        if self.st.scopes.len() >= MAX_SCOPE_DEPTH {
            return Err(self.fail(RuntimeFailure::invalid_args(
                Some(self.current_ring()),
                format!("scope(): scopes nest at most {MAX_SCOPE_DEPTH} deep"),
            )));
        }
        let begin = self.st.scope_tasks.len();
        let id = self.st.scopes_opened;
        self.st.scopes_opened = id.wrapping_add(1);
        self.st.scopes.push(ScopeFrame {
            begin,
            manual,
            site,
            id,
        });
        if let Some(c) = self.st.capture.as_deref_mut() {
            c.begin_scope(manual);
        }
        self.sample("begin", site);
        Ok(())
    }

    /// Record a scope-stats sample for the innermost scope (when enabled).
    pub(super) fn sample(&mut self, phase: &str, site: Site) {
        if self.st.stats.is_none() {
            return;
        }
        let depth = self.st.scopes.len().saturating_sub(1);
        let ring = depth.min(3);
        self.observe(ring);
        let site = match site {
            Site::Root => "root".to_string(),
            Site::Code(l) => format!("{}:{}", l.file(), l.line()),
            Site::Named(i) => self.st.sites[i as usize].clone(),
        };
        let r = &self.st.rings[ring];
        let sample = crate::dfx::ScopeSample {
            site,
            phase: phase.to_string(),
            depth: depth as u32,
            ring: ring as u32,
            task_window_start: r.seen_la as u64,
            task_window_end: r.next as u64,
            heap_start: r.heap_retired,
            heap_end: r.heap_retired + r.heap.used(),
            dep_pool_start: r.deps.tail,
            dep_pool_end: r.deps.top,
            tensormap: self.st.tensormap.used() as u64,
        };
        if let Some(st) = self.st.stats.as_mut() {
            st.push(sample);
        }
    }

    /// Close the innermost scope: drop its reference on each of its tasks (non-blocking).
    pub fn end_scope(&mut self) -> Result<(), RuntimeFailure> {
        if self.st.scopes.len() <= 1 {
            return Err(self.fail(RuntimeFailure::invalid_args(
                Some(0),
                "end_scope(): no scope is open (the root scope ends with the run)",
            )));
        }
        self.close_scope();
        self.check_fatal()
    }

    pub(crate) fn close_scope(&mut self) {
        let Some(&frame) = self.st.scopes.last() else {
            return;
        };
        self.sample("end", frame.site);
        self.st.scopes.pop();
        self.publish_ready();
        if let Some(c) = self.st.capture.as_deref_mut() {
            c.end_scope();
        }
        let tasks = &self.st.scope_tasks[frame.begin..];
        // Rings with a task this loop consumed: their watermarks advance once, after it.
        let mut consumed = 0u8;
        for (i, &id) in tasks.iter().enumerate() {
            // The slots' lines were last written by the cores that completed the tasks:
            // ask for them a few releases ahead, so that the misses overlap instead of
            // each stalling its release's locked instruction in turn.
            if let Some(&ahead) = tasks.get(i + SCOPE_PREFETCH_AHEAD) {
                crate::mem::prefetch_write(self.sh.slot(ahead) as *const _ as *const u8, 1);
            }
            if self.sh.release_ref_held(id, SCOPE_BIT) {
                consumed |= 1 << id.ring();
            }
        }
        self.sh.retired_rings(consumed, self.eng);
        self.st.scope_tasks.truncate(frame.begin);
        if matches!(&self.dry, Some(d) if self.st.scopes.len() < d.level) {
            // The overflowing scope ended: its count is complete.
            let d = self.dry.take().expect("checked");
            self.eng.fail(d.failure(true));
        }
    }

    /// Close every open scope, the root included (end of the orchestration).
    pub(crate) fn close_all_scopes(&mut self) {
        while !self.st.scopes.is_empty() {
            self.close_scope();
        }
    }

    /// Run `f` inside an automatic scope.
    #[track_caller]
    pub fn scope<R>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<R, RuntimeFailure>,
    ) -> Result<R, RuntimeFailure> {
        self.begin_scope(false)?;
        let r = f(self);
        let e = self.end_scope();
        let v = r?;
        e?;
        Ok(v)
    }

    /// Run `f` inside a manual scope (no inferred dependencies).
    #[track_caller]
    pub fn manual_scope<R>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<R, RuntimeFailure>,
    ) -> Result<R, RuntimeFailure> {
        self.begin_scope(true)?;
        let r = f(self);
        let e = self.end_scope();
        let v = r?;
        e?;
        Ok(v)
    }

    /// A submit while a SCOPE_DEADLOCK is being counted: count it (when it belongs to
    /// the overflowing scope), run nothing, return placeholder outputs (address 0) so
    /// that the program can go on to the end of the scope.
    #[cold]
    pub(super) fn count_dry(&mut self, args: &TaskArgs) -> Result<TaskOutputs, RuntimeFailure> {
        let level = self.st.scopes.len();
        let ring = self.current_ring();
        let d = self.dry.as_mut().expect("counting");
        d.counted += 1;
        if level == d.level {
            d.owned += 1;
        }
        let mut stop = d.counted > DRY_COUNT_LIMIT;
        // An id past every id of the run (on the ring the task would have gone to), never
        // used: nothing is submitted any more in this run.
        let mut outputs = TaskOutputs::new(TaskId::new(
            ring as u8,
            self.st.rings[ring].next.wrapping_add(d.counted as u32),
        ));
        for (i, &kind) in args.kinds().iter().enumerate() {
            if kind == ArgKind::Spec {
                let s = args.spec_at(i);
                let nd = s.ndims as usize;
                if nd == 0 || nd > MAX_DIMS {
                    // (A real submit would fail here: stop counting.)
                    stop = true;
                    break;
                }
                outputs.push(&s.materialize(0, outputs.id));
            }
        }
        if stop {
            let f = d.failure(false);
            self.dry = None;
            return Err(self.fail(f));
        }
        Ok(outputs)
    }
}
