//! Failures through the public API: capacity deadlocks (diagnosed, never hung on),
//! failing kernels, misuse; and that the chip is usable after each.

mod common;
use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use taskring::builtin::*;
use taskring::*;

/// A chip whose backstop is far away: a capacity failure that arrives quickly must
/// come from the structural proof, not from the timer.
fn patient_chip() -> ChipWorker {
    ChipWorker::new(ChipOptions {
        cores: 2,
        backstop: Duration::from_secs(120),
        ..Default::default()
    })
    .unwrap()
}

fn noop_task(o: &mut Orchestrator<'_>) -> Result<TaskOutputs, RuntimeFailure> {
    o.submit(NOOP, &TaskArgs::new())
}

/// After a failure the chip runs a normal program, with empty rings (peaks prove it).
fn assert_usable(w: &mut ChipWorker) {
    let prog = Program::new("after", |o, args| {
        let x = args[0].tensor()?;
        o.scope(|o| {
            submit(o, FILL, |t| {
                t.output_existing(x).scalar(Scalar::F64(7.0));
            })
            .map(|_| ())
        })
    });
    let mut x = vec![0f32; 8];
    let args = [host(&mut x, &[8])];
    let rep = w
        .run_with_sizing(&prog, &args, &sizing(4, 4096, 4))
        .expect("the chip is usable after a failure");
    assert_eq!(rep.peak.task_window, [0, 1, 0, 0]);
    assert_eq!(rep.peak.heap, [0; 4]);
    let _ = &args;
    assert!(x.iter().all(|&v| v == 7.0));
}

#[test]
fn scope_deadlock_code_1() {
    let mut w = patient_chip();
    let prog = Program::new("eight_in_one_scope", |o, _| {
        o.scope(|o| {
            for _ in 0..8 {
                noop_task(o)?;
            }
            Ok(())
        })
    });
    let e = w
        .run_with_sizing(&prog, &[], &sizing(4, 4096, 16))
        .unwrap_err();
    assert_eq!(e.code, StatusCode::ScopeDeadlock, "{e}");
    assert_eq!(e.ring, Some(1));
    assert_eq!(e.configured, Some(4));
    // Eight tasks in one scope need a window that holds eight live tasks: 16.
    assert_eq!(e.needed, Some(16));
    assert_eq!(e.resource, Some(Resource::TaskWindow));
    let s = e.to_string();
    assert!(s.starts_with("SCOPE_DEADLOCK (code 1) on ring 1: "), "{s}");
    assert!(s.contains("ring_task_window=4"), "{s}");
    assert_usable(&mut w);
}

/// A scope deadlock reports the window that would have held the whole scope (the rest
/// of the scope is counted, not run), and the hint names it: one retry, not five.
#[test]
fn scope_deadlock_needed_is_the_window_that_fits_the_whole_scope() {
    use std::sync::atomic::AtomicUsize;
    static RAN: AtomicUsize = AtomicUsize::new(0);
    let count = fn_kernel("count", CoreKind::Any, |_| {
        RAN.fetch_add(1, Ordering::SeqCst);
    });
    let mut w = patient_chip();
    let prog = Program::new("fifty_one_in_one_scope", move |o, args| {
        let x = args[0].tensor()?;
        o.scope(|o| {
            for _ in 0..51 {
                // Outputs of counted tasks are placeholders the program can pass on.
                let copied = submit(o, COPY, |t| {
                    t.input(x).output(spec(&[4]));
                })?
                .output(0);
                submit(o, count, |t| {
                    t.input(copied);
                })?;
            }
            Ok(())
        })?;
        submit(o, count, |_| {}).map(|_| ())
    });
    let mut x = vec![1f32; 4];
    let args = [host(&mut x, &[4])];
    let e = w
        .run_with_sizing(&prog, &args, &sizing(4, 1 << 20, 256))
        .unwrap_err();
    assert_eq!(e.code, StatusCode::ScopeDeadlock, "{e}");
    assert_eq!(
        (e.ring, e.configured, e.needed),
        (Some(1), Some(4), Some(128)),
        "{e}"
    );
    assert!(
        e.detail.contains("the scope at depth 1 submits 102 tasks"),
        "{e}"
    );
    assert!(
        e.detail
            .contains("a ring_task_window of 128 slots would have held it"),
        "{e}"
    );
    assert!(
        e.hint()
            .starts_with("runtime_env ring_task_window[1] >= 128; raise ring_task_window"),
        "{}",
        e.hint()
    );
    assert!(
        e.to_string()
            .contains(". Hint: runtime_env ring_task_window[1] >= 128; "),
        "{e}"
    );
    // Nothing after the overflow ran: only the first task of ring 1 could (the second
    // submit, a `count`, was the third, but the run is failed before more run).
    assert!(
        RAN.load(Ordering::SeqCst) <= 1,
        "{} tasks ran",
        RAN.load(Ordering::SeqCst)
    );
    assert_usable(&mut w);
    // The advice fits at once.
    RAN.store(0, Ordering::SeqCst);
    w.run_with_sizing(&prog, &args, &sizing(128, 1 << 20, 256))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(RAN.load(Ordering::SeqCst), 52);
}

/// A program that submits until a submit fails still ends (counting stops at a limit);
/// `needed` is then a lower bound, said as such.
#[test]
fn endless_scope_ends_with_a_lower_bound() {
    // Seen as a scope deadlock, or never (the backstop is 2 minutes): the watchdog
    // ends the test then.
    let _hang = common::watchdog();
    let mut w = patient_chip();
    let prog = Program::new("endless", |o, _| {
        o.scope(|o| loop {
            noop_task(o)?;
        })
    });
    let e = w
        .run_with_sizing(&prog, &[], &sizing(4, 4096, 16))
        .unwrap_err();
    assert_eq!(e.code, StatusCode::ScopeDeadlock, "{e}");
    assert!(e.detail.contains("submitted at least"), "{e}");
    assert!(
        e.detail.contains("(the rest of the scope was not counted)"),
        "{e}"
    );
    // A lower bound is said in the text; `needed` is only a size that holds the run.
    assert_eq!(e.needed, None, "{e}");
    assert!(
        e.detail
            .contains("a ring_task_window of at least 2097152 slots is needed")
            || e.detail.contains("no valid ring_task_window"),
        "{e}"
    );
    assert_usable(&mut w);
}

/// A kernel that returns only once `release` is set (a kernel that "never returns").
fn hanging(name: &str, release: &'static AtomicBool) -> KernelRef {
    fn_kernel(name, CoreKind::Any, move |_| {
        while !release.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
    })
}

/// A chip with a short backstop: a kernel that runs longer than it must not be taken for
/// a deadlock (`docs/api.md` §6.1).
fn short_backstop_chip() -> ChipWorker {
    ChipWorker::new(ChipOptions {
        cores: 2,
        backstop: Duration::from_millis(100),
        ..Default::default()
    })
    .unwrap()
}

/// One task per scope, each sleeping 3.5 backstops, under a window of 4 (the fourth
/// submit waits for the first task) and under a 1 KiB heap (each 1 KiB output waits for
/// the previous task): both wait and complete.
#[test]
fn slow_kernel_under_a_tiny_window_or_heap_waits_and_completes() {
    let slow = fn_kernel("slow", CoreKind::Any, |_| {
        std::thread::sleep(Duration::from_millis(350))
    });
    let mut w = short_backstop_chip();
    for (tasks, out, s) in [
        (6, false, sizing(4, 4096, 16)),
        (3, true, sizing(16, 1024, 16)),
    ] {
        let prog = Program::new("slow", move |o, _| {
            for _ in 0..tasks {
                o.scope(|o| {
                    submit(o, slow, |t| {
                        if out {
                            t.output(spec(&[256]));
                        }
                    })
                    .map(|_| ())
                })?;
            }
            Ok(())
        });
        let rep = w
            .run_with_sizing(&prog, &[], &s)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rep.tasks, tasks);
        assert_eq!(
            (rep.peak.task_window[1], rep.peak.heap[1]),
            if out { (1, 1024) } else { (3, 0) }
        );
    }
}

/// A kernel that never returns while the orchestrator waits for ring space is a
/// SCHEDULER_TIMEOUT naming it (S1), not a capacity deadlock; the chip recovers.
#[test]
fn stuck_kernel_while_the_orchestrator_waits_is_scheduler_timeout() {
    static RELEASE: AtomicBool = AtomicBool::new(false);
    let stuck = hanging("stuck", &RELEASE);
    let mut w = ChipWorker::new(ChipOptions {
        cores: 2,
        backstop: Duration::from_millis(100),
        scheduler_timeout: Duration::from_millis(600),
        ..Default::default()
    })
    .unwrap();
    let prog = Program::new("stuck_head", move |o, _| {
        o.scope(|o| o.submit(stuck, &TaskArgs::new()).map(|_| ()))?;
        for _ in 0..5 {
            o.scope(|o| noop_task(o).map(|_| ()))?;
        }
        Ok(())
    });
    let t0 = std::time::Instant::now();
    let e = w
        .run_with_sizing(&prog, &[], &sizing(4, 4096, 16))
        .unwrap_err();
    assert!(
        t0.elapsed() >= Duration::from_millis(550),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(e.code, StatusCode::SchedulerTimeout, "{e}");
    assert_eq!(e.ring, Some(1));
    assert!(
        e.detail
            .contains("while the orchestrator waited for ring space"),
        "{e}"
    );
    assert!(
        e.detail.contains("sub_class=S1:running-stalled (detail=1)"),
        "{e}"
    );
    assert!(
        e.detail
            .contains("stuck_task_id=task(ring=1, local=0) running kernel 'stuck'"),
        "{e}"
    );
    assert!(e.detail.contains("orch_done=0"), "{e}");
    assert_usable(&mut w);
    RELEASE.store(true, Ordering::SeqCst);
}

#[test]
fn nested_scopes_flow_control_code_3() {
    let mut w = patient_chip();
    let prog = Program::new("nested", |o, _| {
        for _ in 0..8 {
            o.begin_scope(false)?;
            for _ in 0..3 {
                noop_task(o)?;
            }
        }
        Ok(())
    });
    let e = w
        .run_with_sizing(&prog, &[], &sizing(4, 4096, 16))
        .unwrap_err();
    assert_eq!(e.code, StatusCode::FlowControlDeadlock, "{e}");
    assert_eq!(e.ring, Some(3));
    assert!(e.detail.contains("provable head-of-line deadlock"), "{e}");
    // Sizes in the resource's own unit: the window lacks one slot (not the submit's
    // heap bytes).
    assert!(
        e.detail
            .contains("ring_task_window 3 of 4 slots in use, 1 more slot needed"),
        "{e}"
    );
    assert!(
        e.detail
            .contains("ring_task_window of at least 8 slots would be needed"),
        "{e}"
    );
    // What is live plus this submit is a lower bound: `needed` is None, and the hint
    // names the entry to raise and how to learn its size.
    assert_eq!(e.needed, None);
    assert!(
        e.hint().starts_with(
            "runtime_env ring_task_window[3] > 4; the size that holds the run is not known from this failure: \"auto\" for that entry learns it in one dispatch"
        ),
        "{}",
        e.hint()
    );
    assert_usable(&mut w);
}

#[test]
fn oversized_output_heap_code_2() {
    let mut w = patient_chip();
    let prog = Program::new("big_output", |o, _| {
        submit(o, FILL, |t| {
            t.output(spec(&[8 * 1024])).scalar(Scalar::F64(1.0));
        })
        .map(|_| ())
    });
    let e = w
        .run_with_sizing(&prog, &[], &sizing(4, 1024, 16))
        .unwrap_err();
    assert_eq!(e.code, StatusCode::HeapRingDeadlock, "{e}");
    assert_eq!(e.ring, Some(0));
    assert_eq!(e.configured, Some(1024));
    assert_eq!(e.needed, None, "{e}");
    assert!(
        e.detail
            .contains("a ring_heap of at least 32768 bytes is needed"),
        "{e}"
    );
    assert_usable(&mut w);
}

/// An output of 2^64 - 4 bytes (a valid 64-bit size) does not wrap to a small heap
/// allocation when rounded up to 1 KiB: it is larger than any heap, said as such.
#[test]
fn output_near_2_pow_64_bytes_is_larger_than_any_heap() {
    let mut w = patient_chip();
    let prog = Program::new("huge_output", |o, _| {
        // (2^31 + 1) x (2^31 - 1) f32 = 4 * (2^62 - 1) bytes; the row stride fits 32 bits.
        submit(o, NOOP, |t| {
            t.output(TensorSpec::new(&[(1 << 31) + 1, (1 << 31) - 1], DType::F32).unwrap());
        })
        .map(|_| ())
    });
    let e = w
        .run_with_sizing(&prog, &[], &sizing(4, 1 << 20, 16))
        .unwrap_err();
    assert_eq!(e.code, StatusCode::HeapRingDeadlock, "{e}");
    assert_eq!((e.configured, e.needed), (Some(1 << 20), None), "{e}");
    assert!(
        e.detail
            .contains("no valid ring_heap (a power of 2 of at most 2^63 bytes) holds them"),
        "{e}"
    );
    assert_usable(&mut w);
}

#[test]
fn heap_pinned_by_open_scope_code_2() {
    let mut w = patient_chip();
    let prog = Program::new("heap_pinned", |o, _| {
        o.scope(|o| {
            for _ in 0..3 {
                submit(o, FILL, |t| {
                    t.output(spec(&[256])).scalar(Scalar::F64(1.0));
                })?;
            }
            Ok(())
        })
    });
    // Ring 1 holds 2 KiB; three 1 KiB outputs pinned by the open scope cannot fit.
    let s = RingSizing::from_values([16; 4], [4096, 2048, 4096, 4096], [16; 4]).unwrap();
    let e = w.run_with_sizing(&prog, &[], &s).unwrap_err();
    assert_eq!(e.code, StatusCode::HeapRingDeadlock, "{e}");
    assert_eq!(e.ring, Some(1));
    assert!(e.detail.contains("provable head-of-line deadlock"), "{e}");
    assert!(
        e.detail
            .contains("ring_heap 2048 of 2048 bytes in use, 1024 more bytes needed"),
        "{e}"
    );
    assert!(
        e.detail
            .contains("ring_heap of at least 4096 bytes would be needed"),
        "{e}"
    );
    assert_usable(&mut w);
}

/// A window that fills while the task being submitted has a 1 KiB output: the message
/// speaks of slots, not of the output's bytes.
#[test]
fn window_failure_counts_slots_not_bytes() {
    let mut w = patient_chip();
    let prog = Program::new("window_with_outputs", |o, _| {
        o.begin_scope(false)?;
        o.begin_scope(false)?;
        o.begin_scope(false)?;
        for _ in 0..4 {
            submit(o, FILL, |t| {
                t.output(spec(&[256])).scalar(Scalar::F64(1.0));
            })?;
            o.begin_scope(false)?;
        }
        Ok(())
    });
    let e = w
        .run_with_sizing(&prog, &[], &sizing(4, 1 << 20, 16))
        .unwrap_err();
    assert_eq!(e.code, StatusCode::FlowControlDeadlock, "{e}");
    assert!(
        e.detail
            .contains("ring_task_window 3 of 4 slots in use, 1 more slot needed"),
        "{e}"
    );
    assert!(!e.detail.contains("1024 more"), "{e}");
    assert_usable(&mut w);
}

#[test]
fn wide_fanin_dep_pool_code_4() {
    let mut w = patient_chip();
    let prog = Program::new("fanin_128", |o, args| {
        let x = args[0].tensor()?;
        for i in 0..128u64 {
            let row = x.rows_slice(i, i + 1).unwrap();
            submit(o, FILL, |t| {
                t.output_existing(row).scalar(Scalar::F64(i as f64));
            })?;
        }
        submit(o, ROWSUM, |t| {
            t.input(x).output(spec(&[128]));
        })
        .map(|_| ())
    });
    let mut x = vec![0f32; 128 * 4];
    let args = [host(&mut x, &[128, 4])];
    let s = RingSizing::from_values([256, 16, 16, 16], [1 << 20; 4], [4; 4]).unwrap();
    let e = w.run_with_sizing(&prog, &args, &s).unwrap_err();
    assert_eq!(e.code, StatusCode::DepPoolOverflow, "{e}");
    assert_eq!(e.ring, Some(0));
    assert_eq!(e.configured, Some(4));
    assert_usable(&mut w);
    // With a big enough pool the same program runs and the consumer sees every row.
    let s = RingSizing::from_values([256, 16, 16, 16], [1 << 20; 4], [256; 4]).unwrap();
    let rep = w.run_with_sizing(&prog, &args, &s).unwrap();
    assert_eq!(rep.tasks, 129);
}

#[test]
fn back_pressure_chain_and_fanout_never_fail() {
    let mut w = patient_chip();
    let prog = Program::new("chain_100k", |o, args| {
        let x = args[0].tensor()?;
        for _ in 0..100_000 {
            o.scope(|o| {
                submit(o, NOOP, |t| {
                    t.inout(x);
                })
                .map(|_| ())
            })?;
        }
        // Fan-out: one producer, many readers, each in its own scope.
        let src = o.scope(|o| {
            submit(o, FILL, |t| {
                t.output_existing(x).scalar(Scalar::F64(3.0));
            })
        })?;
        let _ = src;
        for _ in 0..2_000 {
            o.scope(|o| {
                submit(o, COPY, |t| {
                    t.input(x).output(spec(&[16]));
                })
                .map(|_| ())
            })?;
        }
        Ok(())
    });
    let mut x = vec![0f32; 16];
    let args = [host(&mut x, &[16])];
    let rep = w
        .run_with_sizing(&prog, &args, &sizing(4, 4096, 4))
        .unwrap();
    assert_eq!(rep.tasks, 102_001);
    assert!(rep.peak.task_window.iter().all(|&p| p <= 3));
}

#[test]
fn failing_kernel_fails_the_run_and_skips_dependants() {
    use std::sync::atomic::AtomicUsize;
    static RAN_AFTER: AtomicUsize = AtomicUsize::new(0);
    let boom = fn_kernel("boom", CoreKind::Any, |_| panic!("deliberate failure"));
    let after = fn_kernel("after", CoreKind::Any, |_| {
        RAN_AFTER.fetch_add(1, Ordering::SeqCst);
    });
    let mut w = patient_chip();
    let prog = Program::new("fails", move |o, args| {
        let x = args[0].tensor()?;
        o.scope(|o| {
            submit(o, boom, |t| {
                t.inout(x);
            })?;
            for _ in 0..3 {
                submit(o, after, |t| {
                    t.inout(x);
                })?;
            }
            Ok(())
        })
    });
    let mut x = vec![0f32; 4];
    let args = [host(&mut x, &[4])];
    for _ in 0..3 {
        let e = w
            .run_with_sizing(&prog, &args, &RingSizing::default())
            .unwrap_err();
        assert_eq!(e.code, StatusCode::TaskFailed, "{e}");
        assert!(e.detail.contains("kernel 'boom'"), "{e}");
        assert!(e.detail.contains("task(ring=1, local=0)"), "{e}");
        assert!(e.detail.contains("deliberate failure"), "{e}");
        assert_eq!(
            RAN_AFTER.load(Ordering::SeqCst),
            0,
            "a dependant of the failed task ran"
        );
        assert_usable(&mut w);
    }
}

/// One misuse of the orchestrator API, given a host tensor.
type Misuse =
    Box<dyn Fn(&mut Orchestrator<'_>, Tensor) -> Result<(), RuntimeFailure> + Send + Sync>;

#[test]
fn misuse_is_invalid_args_naming_the_call() {
    let mut w = patient_chip();
    let cases: Vec<(&str, Misuse)> = vec![
        (
            "expected 3 tensors",
            Box::new(|o, x| {
                submit(o, ADD, |t| {
                    t.input(x).output(spec(&[4]));
                })
                .map(|_| ())
            }),
        ),
        (
            "dtype int32",
            Box::new(|o, x| {
                submit(o, COPY, |t| {
                    t.input(x)
                        .output(TensorSpec::new(&[4], DType::I32).unwrap());
                })
                .map(|_| ())
            }),
        ),
        (
            "shape",
            Box::new(|o, x| {
                submit(o, ADD, |t| {
                    t.input(x).input(x).output(spec(&[5]));
                })
                .map(|_| ())
            }),
        ),
        (
            "all tensors must be added before any scalar",
            Box::new(|o, x| {
                submit(o, SCALE, |t| {
                    t.scalar(Scalar::F64(1.0)).input(x).output(spec(&[4]));
                })
                .map(|_| ())
            }),
        ),
        (
            "auto scope nested inside manual scope",
            Box::new(|o, _| o.manual_scope(|o| o.scope(|_| Ok(())))),
        ),
        (
            "is not a task of this run",
            Box::new(|o, _| {
                submit(o, NOOP, |t| {
                    t.dep(TaskId::new(1, 99));
                })
                .map(|_| ())
            }),
        ),
        (
            "whose scope has ended",
            Box::new(|o, x| {
                let tmp = o.scope(|o| {
                    submit(o, COPY, |t| {
                        t.input(x).output(spec(&[4]));
                    })
                })?;
                submit(o, COPY, |t| {
                    t.input(tmp.output(0)).output(spec(&[4]));
                })
                .map(|_| ())
            }),
        ),
        (
            "is not a task of this run",
            Box::new(|o, _| {
                // An id with junk above the ring bits is not an alias of a real task.
                let first = noop_task(o)?;
                submit(o, NOOP, |t| {
                    t.dep_wait(TaskId(first.id.0 | (1 << 63)));
                })
                .map(|_| ())
            }),
        ),
        ("no scope is open", Box::new(|o, _| o.end_scope())),
        (
            // 2^16 x 2^16 x 2^16 x 2^16 f32: the byte size wraps 64 bits.
            "does not fit 64-bit sizes",
            Box::new(|o, _| {
                submit(o, NOOP, |t| {
                    t.output(TensorSpec {
                        shape: [65536, 65536, 65536, 65536, 1],
                        ndims: 4,
                        dtype: DType::F32,
                    });
                })
                .map(|_| ())
            }),
        ),
        (
            // 2 x 2^16 x 2^16 bytes: the first row-major stride (2^32) does not fit the
            // 32-bit strides; capping it would make the rows overlap.
            "row-major stride beyond 2^32-1",
            Box::new(|o, _| {
                submit(o, NOOP, |t| {
                    t.output(TensorSpec {
                        shape: [2, 65536, 65536, 1, 1],
                        ndims: 3,
                        dtype: DType::U8,
                    });
                })
                .map(|_| ())
            }),
        ),
        (
            // A hand-built spec with too many dims is an error, not a panic.
            "tensor 0 (OUTPUT)",
            Box::new(|o, _| {
                submit(o, NOOP, |t| {
                    t.output(TensorSpec {
                        shape: [2; 5],
                        ndims: 6,
                        dtype: DType::F32,
                    });
                })
                .map(|_| ())
            }),
        ),
        (
            "at most 16 tensors",
            Box::new(|o, x| {
                submit(o, NOOP, |t| {
                    for _ in 0..17 {
                        t.input(x);
                    }
                })
                .map(|_| ())
            }),
        ),
    ];
    for (want, f) in cases {
        let f = std::sync::Arc::new(f);
        let g = f.clone();
        let prog = Program::new("misuse", move |o, args| g(o, args[0].tensor()?));
        let mut x = vec![1f32; 4];
        let args = [host(&mut x, &[4])];
        let e = w
            .run_with_sizing(&prog, &args, &RingSizing::default())
            .unwrap_err();
        assert_eq!(e.code, StatusCode::InvalidArgs, "{want}: {e}");
        assert!(e.to_string().contains(want), "expected '{want}' in: {e}");
        assert_usable(&mut w);
    }
}

#[test]
fn panicking_orchestration_is_reported() {
    let mut w = patient_chip();
    let prog = Program::new("panics", |o, _| {
        noop_task(o)?;
        panic!("orchestration bug");
    });
    let e = w
        .run_with_sizing(&prog, &[], &RingSizing::default())
        .unwrap_err();
    assert!(e.detail.contains("orchestration bug"), "{e}");
    assert_usable(&mut w);
}

#[test]
fn hung_kernel_is_scheduler_timeout_s1_and_the_chip_recovers() {
    static RELEASE: AtomicBool = AtomicBool::new(false);
    let hang = hanging("hang", &RELEASE);
    let mut w = ChipWorker::new(ChipOptions {
        cores: 2,
        scheduler_timeout: Duration::from_millis(300),
        ..Default::default()
    })
    .unwrap();
    let prog = Program::new("hangs", move |o, _| {
        o.scope(|o| {
            let h = o.submit(hang, &TaskArgs::new())?;
            let mut t = TaskArgs::new();
            t.dep(h.id);
            o.submit(NOOP, &t).map(|_| ())
        })
    });
    let e = w
        .run_with_sizing(&prog, &[], &RingSizing::default())
        .unwrap_err();
    assert_eq!(e.code, StatusCode::SchedulerTimeout, "{e}");
    assert!(
        e.detail.contains("sub_class=S1:running-stalled (detail=1)"),
        "{e}"
    );
    assert!(e.detail.contains("kernel 'hang'"), "{e}");
    assert!(
        e.detail.contains("stuck_task_id=task(ring=1, local=0)"),
        "{e}"
    );
    assert!(e.detail.contains("completed=0/2"), "{e}");
    // The stuck core was replaced: the chip still has two working cores.
    assert_usable(&mut w);
    assert_usable(&mut w);
    RELEASE.store(true, Ordering::SeqCst);
}

#[test]
fn task_no_core_can_run_is_scheduler_timeout_s3() {
    // Two AIV cores and an AIC-only kernel: the task is ready but nobody takes it.
    let mut w = ChipWorker::new(ChipOptions {
        cores: 2,
        aic_cores: Some(0),
        scheduler_timeout: Duration::from_millis(200),
        ..Default::default()
    })
    .unwrap();
    let e = run_aic_only_task(&mut w).unwrap_err();
    assert_eq!(e.code, StatusCode::SchedulerTimeout, "{e}");
    assert!(e.detail.contains("sub_class=S3:ready-but-all-idle"), "{e}");
    assert_usable(&mut w);
}

/// A ready task no core can run, while the orchestrator waits for ring space: the
/// backstop does not call that a capacity deadlock (a task is waiting to run); after the
/// scheduler timeout it is SCHEDULER_TIMEOUT S3.
#[test]
fn unrunnable_task_while_the_orchestrator_waits_is_scheduler_timeout_s3() {
    let mut w = ChipWorker::new(ChipOptions {
        cores: 2,
        aic_cores: Some(0),
        backstop: Duration::from_millis(50),
        scheduler_timeout: Duration::from_millis(300),
        ..Default::default()
    })
    .unwrap();
    let prog = Program::new("aic_only_scopes", |o, args| {
        let (a, c) = (args[0].tensor()?, args[1].tensor()?);
        for _ in 0..5 {
            o.scope(|o| {
                submit(o, MATMUL, |t| {
                    t.input(a).input(a).output_existing(c);
                })
                .map(|_| ())
            })?;
        }
        Ok(())
    });
    let mut a = vec![1f32; 4];
    let mut c = vec![0f32; 4];
    let args = [host(&mut a, &[2, 2]), host(&mut c, &[2, 2])];
    let e = w
        .run_with_sizing(&prog, &args, &sizing(4, 4096, 16))
        .unwrap_err();
    assert_eq!(e.code, StatusCode::SchedulerTimeout, "{e}");
    assert!(
        e.detail.contains(
            "while the orchestrator waited for ring space: sub_class=S3:ready-but-all-idle"
        ),
        "{e}"
    );
    let _ = &args;
    assert_usable(&mut w);
}
