//! Failures through the public API: capacity deadlocks (diagnosed, never hung on),
//! failing kernels, misuse; and that the chip is usable after each.

mod common;
use common::*;
use std::time::Duration;
use taskring::builtin::*;
use taskring::*;

/// A chip whose backstop is far away: a capacity failure that arrives quickly must
/// come from the structural proof, not from the timer.
fn patient_chip() -> ChipWorker {
    ChipWorker::new(ChipOptions { cores: 2, backstop: Duration::from_secs(120), ..Default::default() }).unwrap()
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
    let rep = w.run_with_sizing(&prog, &args, &sizing(4, 4096, 4)).expect("the chip is usable after a failure");
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
    let e = w.run_with_sizing(&prog, &[], &sizing(4, 4096, 16)).unwrap_err();
    assert_eq!(e.code, StatusCode::ScopeDeadlock, "{e}");
    assert_eq!(e.ring, Some(1));
    assert_eq!(e.configured, Some(4));
    assert_eq!(e.needed, Some(8));
    assert_eq!(e.resource, Some(Resource::TaskWindow));
    let s = e.to_string();
    assert!(s.starts_with("SCOPE_DEADLOCK (code 1) on ring 1: "), "{s}");
    assert!(s.contains("ring_task_window=4"), "{s}");
    assert_usable(&mut w);
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
    let e = w.run_with_sizing(&prog, &[], &sizing(4, 4096, 16)).unwrap_err();
    assert_eq!(e.code, StatusCode::FlowControlDeadlock, "{e}");
    assert_eq!(e.ring, Some(3));
    assert!(e.detail.contains("provable head-of-line deadlock"), "{e}");
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
    let e = w.run_with_sizing(&prog, &[], &sizing(4, 1024, 16)).unwrap_err();
    assert_eq!(e.code, StatusCode::HeapRingDeadlock, "{e}");
    assert_eq!(e.ring, Some(0));
    assert_eq!(e.configured, Some(1024));
    assert_eq!(e.needed, Some(32 * 1024));
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
    let rep = w.run_with_sizing(&prog, &args, &sizing(4, 4096, 4)).unwrap();
    assert_eq!(rep.tasks, 102_001);
    assert!(rep.peak.task_window.iter().all(|&p| p <= 3));
}

#[test]
fn failing_kernel_fails_the_run_and_skips_dependants() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static RAN_AFTER: AtomicUsize = AtomicUsize::new(0);
    let boom = kernel::fn_kernel("boom", CoreKind::Any, |_| panic!("deliberate failure"));
    let after = kernel::fn_kernel("after", CoreKind::Any, |_| {
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
        let e = w.run_with_sizing(&prog, &args, &RingSizing::default()).unwrap_err();
        assert_eq!(e.code, StatusCode::TaskFailed, "{e}");
        assert!(e.detail.contains("kernel 'boom'"), "{e}");
        assert!(e.detail.contains("task(ring=1, local=0)"), "{e}");
        assert!(e.detail.contains("deliberate failure"), "{e}");
        assert_eq!(RAN_AFTER.load(Ordering::SeqCst), 0, "a dependant of the failed task ran");
        assert_usable(&mut w);
    }
}

#[test]
fn misuse_is_invalid_args_naming_the_call() {
    let mut w = patient_chip();
    let cases: Vec<(&str, Box<dyn Fn(&mut Orchestrator<'_>, Tensor) -> Result<(), RuntimeFailure> + Send + Sync>)> = vec![
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
                    t.input(x).output(TensorSpec::new(&[4], DType::I32).unwrap());
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
                    t.output(TensorSpec { shape: [65536, 65536, 65536, 65536, 1], ndims: 4, dtype: DType::F32 });
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
                    t.output(TensorSpec { shape: [2, 65536, 65536, 1, 1], ndims: 3, dtype: DType::U8 });
                })
                .map(|_| ())
            }),
        ),
        (
            // A hand-built spec with too many dims is an error, not a panic.
            "tensor 0 (OUTPUT)",
            Box::new(|o, _| {
                submit(o, NOOP, |t| {
                    t.output(TensorSpec { shape: [2; 5], ndims: 6, dtype: DType::F32 });
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
        let e = w.run_with_sizing(&prog, &args, &RingSizing::default()).unwrap_err();
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
    let e = w.run_with_sizing(&prog, &[], &RingSizing::default()).unwrap_err();
    assert!(e.detail.contains("orchestration bug"), "{e}");
    assert_usable(&mut w);
}

#[test]
fn hung_kernel_is_scheduler_timeout_s1_and_the_chip_recovers() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static RELEASE: AtomicBool = AtomicBool::new(false);
    let hang = kernel::fn_kernel("hang", CoreKind::Any, |_| {
        while !RELEASE.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
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
    let e = w.run_with_sizing(&prog, &[], &RingSizing::default()).unwrap_err();
    assert_eq!(e.code, StatusCode::SchedulerTimeout, "{e}");
    assert!(e.detail.contains("sub_class=S1:running-stalled (detail=1)"), "{e}");
    assert!(e.detail.contains("kernel 'hang'"), "{e}");
    assert!(e.detail.contains("stuck_task_id=task(ring=1, local=0)"), "{e}");
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
