//! Capture and replay (`docs/api.md` §10): a replay computes what a normal run computes, on
//! random programs; argument checks; `exact_config`; failures during a replay.
//!
//! Random programs: K = 3 host buffers [8, 8] f32 and the runtime outputs the program
//! makes; kernel tasks that read (INPUT) runtime outputs of open scopes, full or a row
//! half, and read-modify-write (INOUT) host buffers, full or a row half; nested auto
//! and manual scopes; explicit deps (`dep` / `dep_wait`); alloc and dummy tasks.
//! Ordering is race-free by construction: consecutive touchers of a host buffer's row
//! half are ordered directly — by inference (both in auto scopes: overlapping INOUT
//! views) or by an explicit dep (either in a manual scope); a runtime output read in a
//! manual scope gets an explicit dep on its creator. So the final buffers of a correct
//! run are deterministic, and a replay (of the same or other arrays with the same
//! starting contents) must reproduce them bit for bit.

mod common;

use common::mix::compute;
use common::{host, spec};
use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, TestRunner};
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use taskring::fn_kernel;
use taskring::*;

const K: usize = 3;
const N: usize = 64;

/// Each writable element = 0.3 * Σ readable[r % rows][c % cols] (+ 0.2 * old for an
/// inout) + salt + 0.125 * index among the writables.
fn mix() -> KernelRef {
    static M: OnceLock<KernelRef> = OnceLock::new();
    *M.get_or_init(|| {
        fn_kernel("replay_mix", CoreKind::Any, |call| {
            let (salt, n_inout) = (call.scalar_f64(0), call.scalar_i64(1) as usize);
            compute(call.tensors, call.n_inputs, n_inout, salt);
        })
    })
}

/// `mix` declared [`Kernel::bounded`] (it is: a fixed loop over its tensors), so that
/// the orchestrator runs such tasks itself while it waits, in runs and in direct
/// replays; half the random programs use it.
fn mix_bounded() -> KernelRef {
    struct Mix;
    impl Kernel for Mix {
        fn name(&self) -> &str {
            "replay_mix_bounded"
        }
        fn bounded(&self) -> bool {
            true
        }
        fn run(&self, call: &KernelCall<'_>) {
            let (salt, n_inout) = (call.scalar_f64(0), call.scalar_i64(1) as usize);
            compute(call.tensors, call.n_inputs, n_inout, salt);
        }
    }
    static M: OnceLock<KernelRef> = OnceLock::new();
    *M.get_or_init(|| KernelRef::leak(Mix))
}

/// A view: a whole [8, 8] buffer or one of its row halves.
#[derive(Clone, Copy, Debug)]
enum View {
    Full,
    Half(u64),
}

impl View {
    fn of(self, t: Tensor) -> Tensor {
        match self {
            View::Full => t,
            View::Half(h) => t.rows_slice(4 * h, 4 * h + 4).unwrap(),
        }
    }
    fn halves(self) -> std::ops::Range<usize> {
        match self {
            View::Full => 0..2,
            View::Half(h) => h as usize..h as usize + 1,
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Begin {
        manual: bool,
    },
    End,
    /// Read runtime outputs `(task index, view)`, read-modify-write host buffers
    /// `(buffer, view)`, make `outs` runtime outputs; explicit deps (index, wait only).
    Task {
        reads: Vec<(usize, View)>,
        writes: Vec<(usize, View)>,
        outs: usize,
        deps: Vec<(usize, bool)>,
        salt: f64,
    },
    Dummy {
        deps: Vec<usize>,
    },
    Alloc,
}

#[derive(Clone, Debug)]
struct Prog {
    ops: Vec<Op>,
    /// Its tasks run [`mix_bounded`] (else [`mix`]).
    bounded: bool,
}

/// Build a program from raw words (see the module doc).
fn generate(words: &[u32]) -> Prog {
    let mut ops = vec![];
    // Per open scope: (manual, tasks that made runtime outputs in it).
    let mut scopes: Vec<(bool, Vec<usize>)> = vec![(false, vec![])];
    // Per buffer half: the last task that touched it and whether it was in a manual scope.
    let mut last: [[Option<(usize, bool)>; 2]; K] = [[None; 2]; K];
    let mut tasks = 0usize;
    for w in words.chunks_exact(4) {
        let manual = scopes.iter().any(|s| s.0);
        match w[0] % 12 {
            0 if scopes.len() < 5 => {
                let m = manual || w[1] % 3 == 0;
                ops.push(Op::Begin { manual: m });
                scopes.push((m, vec![]));
            }
            1 if scopes.len() > 1 => {
                ops.push(Op::End);
                scopes.pop();
            }
            2 if tasks > 0 => {
                ops.push(Op::Dummy {
                    deps: vec![w[1] as usize % tasks],
                });
                tasks += 1;
            }
            3 => {
                ops.push(Op::Alloc);
                tasks += 1;
            }
            _ => {
                let visible: Vec<usize> = scopes.iter().flat_map(|s| s.1.iter().copied()).collect();
                let mut reads = vec![];
                let mut deps = vec![];
                for k in 0..(w[1] % 3) as usize {
                    if visible.is_empty() {
                        break;
                    }
                    let t = visible[(w[2] as usize >> (4 * k)) % visible.len()];
                    let v = if (w[2] >> (16 + k)) & 1 == 0 {
                        View::Full
                    } else {
                        View::Half(((w[2] >> (20 + k)) & 1) as u64)
                    };
                    reads.push((t, v));
                    if manual {
                        deps.push((t, false));
                    }
                }
                let mut writes: Vec<(usize, View)> = vec![];
                for k in 0..1 + (w[3] % 2) as usize {
                    let b = ((w[3] >> (2 + 4 * k)) as usize) % K;
                    if writes.iter().any(|x| x.0 == b) {
                        continue;
                    }
                    let v = match (w[3] >> (12 + 2 * k)) % 3 {
                        0 => View::Full,
                        h => View::Half(h as u64 - 1),
                    };
                    for h in v.halves() {
                        if let Some((p, pm)) = last[b][h] {
                            if manual || pm {
                                deps.push((
                                    p,
                                    (w[3] >> (20 + h)) & 1 == 1 && !reads.iter().any(|r| r.0 == p),
                                ));
                            }
                        }
                    }
                    writes.push((b, v));
                }
                deps.sort();
                deps.dedup_by_key(|d| d.0);
                let outs = (w[1] >> 8) as usize % 2;
                for &(b, v) in &writes {
                    for h in v.halves() {
                        last[b][h] = Some((tasks, manual));
                    }
                }
                if outs > 0 {
                    scopes.last_mut().unwrap().1.push(tasks);
                }
                let salt = (w[0] % 97) as f64 / 16.0;
                ops.push(Op::Task {
                    reads,
                    writes,
                    outs,
                    deps,
                    salt,
                });
                tasks += 1;
            }
        }
    }
    Prog {
        ops,
        bounded: words.len() % 2 == 1,
    }
}

fn program(p: Arc<Prog>) -> Program {
    named_program("random", p)
}

fn named_program(name: &str, p: Arc<Prog>) -> Program {
    Program::new(name, move |o, args| {
        let mut ids: Vec<TaskId> = vec![];
        let mut outs: Vec<Option<Tensor>> = vec![];
        for op in &p.ops {
            match op {
                Op::Begin { manual } => o.begin_scope(*manual)?,
                Op::End => o.end_scope()?,
                Op::Alloc => {
                    let r = o.alloc(&[spec(&[8, 8])])?;
                    ids.push(r.id);
                    outs.push(None);
                }
                Op::Dummy { deps } => {
                    let mut a = TaskArgs::new();
                    for &d in deps {
                        a.dep(ids[d]);
                    }
                    let r = o.submit_dummy(&a)?;
                    ids.push(r.id);
                    outs.push(None);
                }
                Op::Task {
                    reads,
                    writes,
                    outs: n_out,
                    deps,
                    salt,
                } => {
                    let mut a = TaskArgs::new();
                    for &(t, v) in reads {
                        a.input(v.of(outs[t].expect("reads name tasks with outputs")));
                    }
                    for &(b, v) in writes {
                        a.inout(v.of(args[b].tensor()?));
                    }
                    for _ in 0..*n_out {
                        a.output(spec(&[8, 8]));
                    }
                    for &(d, wait_only) in deps {
                        if wait_only {
                            a.dep_wait(ids[d]);
                        } else {
                            a.dep(ids[d]);
                        }
                    }
                    a.scalar(Scalar::F64(*salt))
                        .scalar(Scalar::I64(writes.len() as i64));
                    let k = if p.bounded { mix_bounded() } else { mix() };
                    let r = o.submit(k, &a)?;
                    ids.push(r.id);
                    outs.push((*n_out > 0).then(|| r.output(0)));
                }
            }
        }
        Ok(())
    })
}

fn start_data(seed: u32) -> Vec<Vec<f32>> {
    (0..K)
        .map(|b| {
            (0..N)
                .map(|i| ((i * 7 + b * 13 + seed as usize) % 17) as f32 / 8.0)
                .collect()
        })
        .collect()
}

fn args_of(bufs: &mut [Vec<f32>]) -> Vec<Arg<'_>> {
    bufs.iter_mut().map(|b| host(b, &[8, 8])).collect()
}

fn chip() -> ChipWorker {
    ChipWorker::new(ChipOptions {
        cores: 2,
        ..Default::default()
    })
    .expect("chip")
}

/// Normal run, capture, replays (same arrays reset, other arrays, under the exact
/// config): all equal.
fn check(w: &mut ChipWorker, words: &[u32]) -> Result<(), String> {
    let p = Arc::new(generate(words));
    let prog = program(p.clone());
    let cfg = CallConfig::default();
    let mut normal = start_data(1);
    w.run(&prog, &args_of(&mut normal), &cfg)
        .map_err(|e| format!("normal run: {e}\n{p:?}"))?;
    let mut cap = start_data(1);
    let g = w
        .capture(&prog, &args_of(&mut cap), &cfg)
        .map_err(|e| format!("capture: {e}\n{p:?}"))?;
    if cap != normal {
        return Err(format!("the capture run differs from a normal run\n{p:?}"));
    }
    let exact = g.exact_config();
    for (label, c, rings) in [
        ("captured sizing", None, false),
        ("captured sizing, through the rings", None, true),
        ("exact config", Some(&exact), false),
        ("exact config, through the rings", Some(&exact), true),
    ] {
        let mut other = start_data(1);
        let rep = if rings {
            g.replay_through_rings(w, &args_of(&mut other), c)
        } else {
            g.replay(w, &args_of(&mut other), c)
        };
        let rep = rep.map_err(|e| format!("replay ({label}): {e}\n{p:?}\n{exact:?}"))?;
        if !rep.replayed || rep.tasks as usize != g.tasks() {
            return Err(format!("replay report: {rep:?}"));
        }
        if other != normal {
            return Err(format!("replay ({label}) differs from a normal run\n{p:?}"));
        }
    }
    Ok(())
}

#[test]
fn replay_equals_a_normal_run_on_random_programs() {
    let w = std::cell::RefCell::new(chip());
    let cases = 300;
    let t0 = Instant::now();
    let mut runner = TestRunner::new(PtConfig {
        cases,
        failure_persistence: None,
        ..PtConfig::default()
    });
    runner
        .run(&prop::collection::vec(any::<u32>(), 8..160), |words| {
            check(&mut w.borrow_mut(), &words).map_err(proptest::test_runner::TestCaseError::fail)
        })
        .unwrap();
    eprintln!(
        "{cases} random programs in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

/// `"auto"` on a random program: the first dispatch (which learns) and the second
/// (under the learned sizing) both equal a normal run; every auto entry holds the run's
/// peak and its structural need, and is within 2× that need before the headroom.
fn check_auto(w: &mut ChipWorker, words: &[u32], case: usize) -> Result<(), String> {
    let p = Arc::new(generate(words));
    let prog = named_program(&format!("auto{case}"), p.clone());
    let mut normal = start_data(1);
    w.run(&prog, &args_of(&mut normal), &CallConfig::default())
        .map_err(|e| format!("normal run: {e}\n{p:?}"))?;
    let mut auto = CallConfig::default();
    for f in RingField::ALL {
        auto.runtime_env.set_all(f, RuntimeEnv::AUTO);
    }
    let mut sizes = vec![];
    for pass in 0..2 {
        let mut got = start_data(1);
        let rep = w
            .run(&prog, &args_of(&mut got), &auto)
            .map_err(|e| format!("auto pass {pass}: {e}\n{p:?}"))?;
        if got != normal {
            return Err(format!("auto pass {pass} differs from a normal run\n{p:?}"));
        }
        for f in RingField::ALL {
            for r in 0..4 {
                if rep.ring_sizing.source(f, r) != SizeSource::Auto {
                    return Err(format!("source of {f:?}[{r}] is not auto"));
                }
            }
        }
        let (s, pk) = (rep.ring_sizing, rep.peak);
        for r in 0..4 {
            if s.task_window[r] <= pk.task_window[r]
                || s.heap[r] < pk.heap[r]
                || s.dep_pool[r] < pk.dep_pool[r]
            {
                return Err(format!("pass {pass}: a size below its peak: {s} {pk:?}"));
            }
        }
        sizes.push(s);
    }
    // The exact need, as a capture gives it.
    let mut cap = start_data(1);
    let g = w
        .capture(&prog, &args_of(&mut cap), &CallConfig::default())
        .map_err(|e| format!("capture: {e}"))?;
    let n = g.structural_needs();
    let learned = sizes[1];
    for r in 0..4 {
        let need = [n.task_window[r] + 1, n.heap[r], n.dep_pool[r]];
        let got = [learned.task_window[r], learned.heap[r], learned.dep_pool[r]];
        for (k, f) in RingField::ALL.into_iter().enumerate() {
            let smallest = [4, 1024, 4][k];
            let within =
                got[k] <= smallest || got[k] as f64 / AUTO_HEADROOM <= 2.0 * need[k] as f64;
            if got[k] < need[k] || !within {
                return Err(format!(
                    "{f:?}[{r}] = {} for a need of {} (below it, or > 2x before headroom)",
                    got[k], need[k]
                ));
            }
        }
    }
    Ok(())
}

#[test]
fn auto_sizing_equals_a_normal_run_on_random_programs() {
    let w = std::cell::RefCell::new(chip());
    let cases = 120;
    let case = std::cell::Cell::new(0usize);
    let mut runner = TestRunner::new(PtConfig {
        cases: cases as u32,
        failure_persistence: None,
        ..PtConfig::default()
    });
    runner
        .run(&prop::collection::vec(any::<u32>(), 8..160), |words| {
            case.set(case.get() + 1);
            check_auto(&mut w.borrow_mut(), &words, case.get())
                .map_err(proptest::test_runner::TestCaseError::fail)
        })
        .unwrap();
}

/// A chain of `n` INOUT updates of one buffer inside one scope, plus a fan-out of
/// runtime outputs (all live until the scope ends: the peaks are structural).
fn scoped_chain(n: usize) -> Program {
    Program::new("scoped_chain", move |o, args| {
        let a = args[0].tensor()?;
        o.scope(|o| {
            for i in 0..n {
                let mut t = TaskArgs::new();
                t.inout(a)
                    .output(spec(&[8, 8]))
                    .scalar(Scalar::F64(i as f64))
                    .scalar(Scalar::I64(1));
                o.submit(mix(), &t)?;
            }
            Ok(())
        })
    })
}

#[test]
fn exact_config_holds_and_smaller_sizes_fail_with_the_right_code() {
    let mut w = chip();
    let prog = scoped_chain(20);
    let mut a = vec![1f32; N];
    let g = w
        .capture(&prog, &[host(&mut a, &[8, 8])], &CallConfig::default())
        .unwrap();
    assert_eq!(g.tasks(), 20);
    assert_eq!(g.edges(), 19);
    let needs = g.ring_needs();
    assert_eq!(needs.task_window[1], 20);
    assert_eq!(needs.heap[1], 20 * 1024);
    let exact = g.exact_config();
    let env = exact.runtime_env;
    assert_eq!(env.ring_task_window[1], 32);
    assert_eq!(env.ring_heap[1], 32 * 1024);
    assert_eq!(env.ring_task_window[0], 4);
    assert_eq!(env.ring_heap[0], 1024);
    assert!(env.ring_dep_pool[1] >= 19, "{env:?}");
    for _ in 0..20 {
        let mut b = vec![1f32; N];
        let rep = g
            .replay(&mut w, &[host(&mut b, &[8, 8])], Some(&exact))
            .expect("the exact config never fails");
        assert!(rep.replayed);
        assert_eq!(rep.ring_sizing.task_window[1], 32);
    }
    // Halve one resource of ring 1 at a time: the replay fails with that resource's code.
    type Shrink = fn(&mut RuntimeEnv);
    let cases: [(Shrink, StatusCode); 2] = [
        (|e| e.ring_task_window[1] /= 2, StatusCode::ScopeDeadlock),
        (|e| e.ring_heap[1] /= 2, StatusCode::HeapRingDeadlock),
    ];
    for (shrink, code) in cases {
        let mut c = exact.clone();
        shrink(&mut c.runtime_env);
        let mut b = vec![1f32; N];
        match g.replay(&mut w, &[host(&mut b, &[8, 8])], Some(&c)) {
            Err(ReplayError::Run(RunError::Failure(f))) => assert_eq!(f.code, code, "{f}"),
            other => panic!("expected {code:?}, got {other:?}"),
        }
        // The worker is usable after the failure.
        let mut b = vec![1f32; N];
        g.replay(&mut w, &[host(&mut b, &[8, 8])], Some(&exact))
            .unwrap();
    }
}

#[test]
fn exact_config_of_random_programs_never_fails_for_capacity() {
    let w = std::cell::RefCell::new(chip());
    let mut runner = TestRunner::new(PtConfig {
        cases: 100,
        failure_persistence: None,
        ..PtConfig::default()
    });
    runner
        .run(&prop::collection::vec(any::<u32>(), 8..200), |words| {
            let p = Arc::new(generate(&words));
            let prog = program(p.clone());
            let mut d = start_data(2);
            let w = &mut *w.borrow_mut();
            let g = w
                .capture(&prog, &args_of(&mut d), &CallConfig::default())
                .unwrap();
            let exact = g.exact_config();
            for rings in [false, true, true] {
                let mut d = start_data(2);
                let r = if rings {
                    g.replay_through_rings(w, &args_of(&mut d), Some(&exact))
                } else {
                    g.replay(w, &args_of(&mut d), Some(&exact))
                };
                if let Err(e) = r {
                    return Err(proptest::test_runner::TestCaseError::fail(format!(
                        "{e}\n{exact:?}\n{p:?}"
                    )));
                }
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn arguments_must_match_count_shape_and_dtype() {
    let mut w = chip();
    let prog = scoped_chain(3);
    let mut a = vec![1f32; N];
    let g = w
        .capture(&prog, &[host(&mut a, &[8, 8])], &CallConfig::default())
        .unwrap();
    let mut b = vec![1f32; N];
    let err = g
        .replay(&mut w, &[host(&mut b, &[4, 16])], None)
        .unwrap_err();
    assert!(
        matches!(&err, ReplayError::Args { index: Some(0), .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().starts_with("argument 0: shape [4, 16]"),
        "{err}"
    );
    let err = g.replay(&mut w, &[], None).unwrap_err();
    assert!(
        matches!(err, ReplayError::Args { index: None, .. }),
        "{err:?}"
    );
    let err = g
        .replay(&mut w, &[Arg::Scalar(Scalar::I64(1))], None)
        .unwrap_err();
    assert!(
        matches!(err, ReplayError::Args { index: Some(0), .. }),
        "{err:?}"
    );
    let mut c = vec![0i32; N];
    let t = Tensor::from_raw(c.as_mut_ptr() as u64, &[8, 8], DType::I32);
    let err = g
        .replay(
            &mut w,
            // safety: `t` is `c`'s 64 i32s exactly, and `c` is alive and untouched
            // until the replay returns.
            &[Arg::Tensor(unsafe { CallerTensor::from_raw(t) })],
            None,
        )
        .unwrap_err();
    assert!(err.to_string().contains("dtype int32"), "{err}");
    // Another worker: refused.
    let mut w2 = chip();
    let err = g
        .replay(&mut w2, &[host(&mut b, &[8, 8])], None)
        .unwrap_err();
    assert!(matches!(err, ReplayError::WrongWorker { .. }), "{err:?}");
    // Other arrays of the same shape: fine, and the result is the program's.
    let mut x = vec![2f32; N];
    let mut y = vec![2f32; N];
    w.run(&prog, &[host(&mut x, &[8, 8])], &CallConfig::default())
        .unwrap();
    g.replay(&mut w, &[host(&mut y, &[8, 8])], None).unwrap();
    assert_eq!(x, y);
}

#[test]
fn a_failing_kernel_during_replay_fails_it_and_the_worker_stays_usable() {
    let mut w = chip();
    // Fails when its scalar says so (the flag is read from a host buffer: element 0).
    let fail = fn_kernel("fail_if_flag", CoreKind::Any, |call| {
        // safety: the program passes an f32 host buffer of at least one element as
        // tensor 0, checked against the buffer by the runtime before the kernel runs.
        let flag = unsafe { *(call.tensors[0].data_ptr() as *const f32) };
        if flag != 0.0 {
            panic!("flag set");
        }
    });
    let prog = Program::new("fails", move |o, args| {
        let (flag, a) = (args[0].tensor()?, args[1].tensor()?);
        for i in 0..8 {
            let mut t = TaskArgs::new();
            t.inout(a)
                .scalar(Scalar::F64(i as f64))
                .scalar(Scalar::I64(1));
            o.submit(mix(), &t)?;
        }
        let mut t = TaskArgs::new();
        t.input(flag);
        let id = o.submit(fail, &t)?.id;
        // Dependants of the failing task never run.
        let mut t = TaskArgs::new();
        t.inout(a)
            .dep(id)
            .scalar(Scalar::F64(9.0))
            .scalar(Scalar::I64(1));
        o.submit(mix(), &t)?;
        Ok(())
    });
    let mut flag = vec![0f32; 4];
    let mut a = vec![1f32; N];
    let g = w
        .capture(
            &prog,
            &[host(&mut flag, &[4]), host(&mut a, &[8, 8])],
            &CallConfig::default(),
        )
        .unwrap();
    let mut flag = vec![1f32; 4];
    let mut b = vec![1f32; N];
    let err = g
        .replay(
            &mut w,
            &[host(&mut flag, &[4]), host(&mut b, &[8, 8])],
            None,
        )
        .unwrap_err();
    match &err {
        ReplayError::Run(RunError::Failure(f)) => {
            assert_eq!(f.code, StatusCode::TaskFailed);
            assert!(f.to_string().contains("fail_if_flag"), "{f}");
        }
        e => panic!("{e:?}"),
    }
    // Usable: a replay and a normal run afterwards give the same result.
    let mut flag = vec![0f32; 4];
    let mut c = vec![1f32; N];
    let rep = g
        .replay(
            &mut w,
            &[host(&mut flag, &[4]), host(&mut c, &[8, 8])],
            None,
        )
        .unwrap();
    assert!(rep.replayed);
    assert_eq!(c, a);
    let rep = w
        .run(
            &prog,
            &[host(&mut flag, &[4]), host(&mut b, &[8, 8])],
            &CallConfig::default(),
        )
        .unwrap();
    assert!(!rep.replayed);
}

#[test]
fn a_stuck_kernel_during_replay_is_a_scheduler_timeout_and_the_worker_recovers() {
    let mut w = ChipWorker::new(ChipOptions {
        cores: 2,
        scheduler_timeout: std::time::Duration::from_millis(300),
        ..Default::default()
    })
    .unwrap();
    let nap = fn_kernel("nap_if_flag", CoreKind::Any, |call| {
        // safety: the program passes an f32 host buffer of at least one element as
        // tensor 0, checked against the buffer by the runtime before the kernel runs.
        if unsafe { *(call.tensors[0].data_ptr() as *const f32) } != 0.0 {
            std::thread::sleep(std::time::Duration::from_millis(1500));
        }
    });
    let prog = Program::new("naps", move |o, args| {
        let (flag, a) = (args[0].tensor()?, args[1].tensor()?);
        let mut t = TaskArgs::new();
        t.input(flag).inout(a);
        o.submit(nap, &t)?;
        let mut t = TaskArgs::new();
        t.inout(a).scalar(Scalar::F64(1.0)).scalar(Scalar::I64(1));
        o.submit(mix(), &t).map(|_| ())
    });
    let mut flag = vec![0f32; 4];
    let mut a = vec![1f32; N];
    let g = w
        .capture(
            &prog,
            &[host(&mut flag, &[4]), host(&mut a, &[8, 8])],
            &CallConfig::default(),
        )
        .unwrap();
    assert!(g.fits(&RingSizing::default()), "a direct replay");
    let mut flag1 = vec![1f32; 4];
    let mut b = vec![1f32; N];
    match g.replay(
        &mut w,
        &[host(&mut flag1, &[4]), host(&mut b, &[8, 8])],
        None,
    ) {
        Err(ReplayError::Run(RunError::Failure(f))) => {
            assert_eq!(f.code, StatusCode::SchedulerTimeout, "{f}");
            assert!(f.to_string().contains("nap_if_flag"), "{f}");
        }
        other => panic!("{other:?}"),
    }
    // The stuck core was replaced; the worker runs and replays.
    let mut c = vec![1f32; N];
    g.replay(
        &mut w,
        &[host(&mut flag, &[4]), host(&mut c, &[8, 8])],
        None,
    )
    .unwrap();
    assert_eq!(c, a);
    std::thread::sleep(std::time::Duration::from_millis(1500)); // the abandoned core wakes, touches nothing
    let mut d = vec![1f32; N];
    g.replay_through_rings(
        &mut w,
        &[host(&mut flag, &[4]), host(&mut d, &[8, 8])],
        None,
    )
    .unwrap();
    assert_eq!(d, a);
}

/// Kernels of zero-sized types share one data address (they differ only in their
/// vtables): a replay must still call each task's own kernel.
#[test]
fn a_replay_calls_each_task_its_own_kernel_even_of_zero_sized_types() {
    struct One;
    struct Two;
    /// `f` on each of a contiguous f32 tensor's elements.
    fn apply(t: &Tensor, f: impl Fn(f32) -> f32) {
        let p = t.data_ptr() as *mut f32;
        for i in 0..t.numel() as usize {
            // safety: the task's INOUT tensor, contiguous, `numel` elements.
            unsafe { *p.add(i) = f(*p.add(i)) };
        }
    }
    impl Kernel for One {
        fn name(&self) -> &str {
            "zst_one"
        }
        fn run(&self, call: &KernelCall<'_>) {
            apply(&call.tensors[0], |x| x * 2.0 + 1.0);
        }
    }
    impl Kernel for Two {
        fn name(&self) -> &str {
            "zst_two"
        }
        fn run(&self, call: &KernelCall<'_>) {
            apply(&call.tensors[0], |x| x * 3.0 - 2.0);
        }
    }
    static K: OnceLock<(KernelRef, KernelRef)> = OnceLock::new();
    let (one, two) = *K.get_or_init(|| (KernelRef::leak(One), KernelRef::leak(Two)));
    let prog = Program::new("two_zst_kernels", move |o, args| {
        let x = args[0].tensor()?;
        for k in [one, two, two, one] {
            let mut t = TaskArgs::new();
            t.inout(x);
            o.submit(k, &t)?;
        }
        Ok(())
    });
    let mut w = chip();
    let mut a = vec![1.0f32; 16];
    let g = w
        .capture(&prog, &[host(&mut a, &[16])], &CallConfig::default())
        .unwrap();
    // 1 -> 3 -> 7 -> 19 -> 39
    assert_eq!(a, vec![39.0f32; 16]);
    let mut b = vec![1.0f32; 16];
    let rep = g.replay(&mut w, &[host(&mut b, &[16])], None).unwrap();
    assert!(rep.replayed);
    assert_eq!(b, vec![39.0f32; 16]);
}

/// A direct replay's threads keep the successors they can run in deques that the
/// others steal from; the caller (kind Any) keeps tasks of both kinds, a core that
/// steals one it cannot run hands it to the shared queue of its kind. A fan-out of
/// consumers of alternating AIC and AIV kernels (and some of kind Any), each writing
/// its own row, replayed many times on chips of 2 and 3 cores: every row is written by
/// the right kernel every time.
#[test]
fn mixed_kind_fan_outs_replay_right_through_the_deques() {
    struct Row(CoreKind, f32, &'static str);
    impl Kernel for Row {
        fn name(&self) -> &str {
            self.2
        }
        fn core(&self) -> CoreKind {
            self.0
        }
        fn bounded(&self) -> bool {
            true
        }
        fn run(&self, call: &KernelCall<'_>) {
            // On a core thread ("taskring-core{i}-{kind}"), the core's kind must be
            // able to run this kernel (the caller's thread runs every kind).
            let t = std::thread::current();
            let name = t.name().unwrap_or("");
            if name.starts_with("taskring-core") && self.0 != CoreKind::Any {
                assert!(
                    name.ends_with(self.0.name()) || name.ends_with("any"),
                    "kernel '{}' ran on {name}",
                    self.2
                );
            }
            // tensors: [seed (input), row (output)]: row[j] = seed[j] * factor.
            let (s, r) = (&call.tensors[0], &call.tensors[1]);
            let (sp, rp) = (s.data_ptr() as *const f32, r.data_ptr() as *mut f32);
            for j in 0..16 {
                // safety: both are contiguous 16-float views of the test's buffers.
                unsafe { *rp.add(j) = *sp.add(j) * self.1 };
            }
        }
    }
    /// The fan-out's producer: seed[j] += 1 (INOUT).
    struct Bump;
    impl Kernel for Bump {
        fn name(&self) -> &str {
            "bump"
        }
        fn bounded(&self) -> bool {
            true
        }
        fn run(&self, call: &KernelCall<'_>) {
            let p = call.tensors[0].data_ptr() as *mut f32;
            for j in 0..16 {
                // safety: the test's contiguous 16-float seed.
                unsafe { *p.add(j) += 1.0 };
            }
        }
    }
    static K: OnceLock<[KernelRef; 4]> = OnceLock::new();
    let ks = *K.get_or_init(|| {
        [
            KernelRef::leak(Row(CoreKind::Aic, 2.0, "row_aic")),
            KernelRef::leak(Row(CoreKind::Aiv, 3.0, "row_aiv")),
            KernelRef::leak(Row(CoreKind::Any, 5.0, "row_any")),
            KernelRef::leak(Bump),
        ]
    });
    const N: u32 = 600;
    let prog = Program::new("mixed_fanout", move |o, args| {
        let (seed, out) = (args[0].tensor()?, args[1].tensor()?);
        let rows = out
            .view(&[N, 16], 0, None)
            .map_err(|e| RuntimeFailure::invalid_args(None, e.to_string()))?;
        let mut b = TaskArgs::new();
        b.inout(seed);
        o.submit(ks[3], &b)?;
        for i in 0..N {
            let mut t = TaskArgs::new();
            t.input(seed)
                .output_existing(rows.rows_slice(i as u64, i as u64 + 1).expect("row"));
            o.submit(ks[(i % 7 % 3) as usize], &t)?;
        }
        Ok(())
    });
    // `seed` as it was before the run (the producer adds 1).
    let expect = |seed: &[f32]| -> Vec<f32> {
        (0..N as usize)
            .flat_map(|i| {
                let f = [2.0f32, 3.0, 5.0][i % 7 % 3];
                seed.iter().map(move |x| (x + 1.0) * f)
            })
            .collect()
    };
    for cores in [2, 3] {
        let mut w = ChipWorker::new(ChipOptions {
            cores,
            ..Default::default()
        })
        .expect("chip");
        let mut seed: Vec<f32> = (0..16).map(|j| j as f32 + 1.0).collect();
        let seed0 = seed.clone();
        let mut out = vec![0f32; (N * 16) as usize];
        let g = w
            .capture(
                &prog,
                &[host(&mut seed, &[16]), host(&mut out, &[N * 16])],
                &CallConfig::default(),
            )
            .expect("capture");
        assert_eq!(out, expect(&seed0), "capture run, {cores} cores");
        for round in 0..30 {
            let mut seed: Vec<f32> = (0..16).map(|j| (j + round) as f32).collect();
            let seed0 = seed.clone();
            let mut out = vec![0f32; (N * 16) as usize];
            let rep = g
                .replay(
                    &mut w,
                    &[host(&mut seed, &[16]), host(&mut out, &[N * 16])],
                    None,
                )
                .expect("replay");
            assert!(rep.replayed);
            assert_eq!(out, expect(&seed0), "replay {round}, {cores} cores");
        }
    }
}
