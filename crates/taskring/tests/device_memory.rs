//! Device memory through the public API: arenas charged at their footprint, evicted
//! when a new one does not fit, DEVICE_OUT_OF_MEMORY (the worker stays usable) when
//! one cannot fit at all, and the run report's figures.

mod common;

use common::*;
use taskring::builtin::*;
use taskring::*;

fn fill(o: &mut Orchestrator<'_>, args: &[Arg<'_>]) -> Result<(), RuntimeFailure> {
    let x = args[0].tensor()?;
    submit(o, FILL, |t| {
        t.output_existing(x).scalar(Scalar::F64(3.0));
    })
    .map(|_| ())
}

fn chip_with(device_memory: u64) -> ChipWorker {
    ChipWorker::new(ChipOptions {
        cores: 2,
        device_memory,
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn an_oversized_sizing_is_device_out_of_memory_and_the_worker_stays_usable() {
    let small = sizing(16, 64 << 10, 64);
    let big = sizing(16, 256 << 20, 64);
    let mut w = chip_with(device_footprint(&small) + (64 << 20));
    let prog = Program::new("fill", fill);
    let mut x = vec![0f32; 16];
    let rep = w
        .run_with_sizing(&prog, &[host(&mut x, &[16])], &small)
        .unwrap();
    assert_eq!(rep.device_memory.arena_bytes, device_footprint(&small));
    assert_eq!(rep.device_memory.used_bytes, device_footprint(&small));
    assert_eq!(
        rep.device_memory.capacity_bytes,
        device_footprint(&small) + (64 << 20)
    );
    let mut y = vec![0f32; 16];
    let e = w
        .run_with_sizing(&prog, &[host(&mut y, &[16])], &big)
        .unwrap_err();
    assert_eq!(e.code, StatusCode::DeviceOutOfMemory, "{e}");
    assert_eq!(e.name(), "DEVICE_OUT_OF_MEMORY");
    let text = e.to_string();
    assert!(
        text.contains(&format!("needs {} bytes", device_footprint(&big))),
        "{text}"
    );
    assert!(
        text.contains("heap=[16384") || text.contains("heap=[65536"),
        "{text}"
    );
    assert!(text.contains("smaller runtime_env"), "{text}");
    assert!(y.iter().all(|&v| v == 0.0), "nothing ran");
    // Nothing was evicted, and the next run reuses the resident arena.
    let rep = w
        .run_with_sizing(&prog, &[host(&mut y, &[16])], &small)
        .unwrap();
    assert!(rep.arena_hit);
    assert!(y.iter().all(|&v| v == 3.0));
}

#[test]
fn arenas_that_do_not_fit_together_take_turns() {
    let (a, b) = (sizing(16, 32 << 20, 64), sizing(32, 32 << 20, 64));
    let mut w = chip_with(device_footprint(&a) + device_footprint(&b) / 2);
    let prog = Program::new("fill", fill);
    let mut x = vec![0f32; 16];
    for s in [&a, &b, &a] {
        let rep = w
            .run_with_sizing(&prog, &[host(&mut x, &[16])], s)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!rep.arena_hit);
        assert!(rep.device_memory.used_bytes <= rep.device_memory.capacity_bytes);
    }
    let st = w.arena_stats();
    assert_eq!((st.builds, st.evictions), (3, 2));
    assert_eq!(st.resident, vec![a.key()]);
    assert_eq!(st.resident_bytes, device_footprint(&a));
}

#[test]
fn a_prewarm_that_cannot_fit_fails_the_chip_at_setup() {
    let big = sizing(16, 256 << 20, 64);
    let e = ChipWorker::new(ChipOptions {
        cores: 1,
        prewarm: vec![big],
        device_memory: 64 << 20,
        ..Default::default()
    })
    .err()
    .expect("a prewarm larger than the device");
    assert_eq!(e.code, StatusCode::DeviceOutOfMemory, "{e}");
    let e = ChipWorker::new(ChipOptions {
        device_memory: 1000,
        ..Default::default()
    })
    .err()
    .unwrap();
    assert!(
        e.detail
            .contains("device_memory must be an int >= 1048576 (bytes), got 1000"),
        "{e}"
    );
}

/// "auto" under a device memory smaller than the default sizing: the learning dispatch
/// shrinks its auto entries until the arena fits, then the learned sizing is small.
#[test]
fn auto_learns_under_a_small_device_memory() {
    let mut w = chip_with(64 << 20);
    let prog = Program::new("fill", fill);
    let mut cfg = CallConfig::default();
    for f in RingField::ALL {
        cfg.runtime_env.set_all(f, RuntimeEnv::AUTO);
    }
    let mut x = vec![0f32; 16];
    let first = w
        .run(&prog, &[host(&mut x, &[16])], &cfg)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(first.device_memory.arena_bytes <= 64 << 20);
    let second = w.run(&prog, &[host(&mut x, &[16])], &cfg).unwrap();
    assert!(second.device_memory.arena_bytes < 8 << 20, "{second:?}");
    assert_eq!(
        second.ring_sizing.source(RingField::Heap, 0),
        SizeSource::Auto
    );
    assert!(x.iter().all(|&v| v == 3.0));
}

/// The learning dispatch of "auto" drops only an arena it built itself: a prewarmed
/// default arena stays for the programs that use the defaults.
#[test]
fn auto_keeps_a_prewarmed_arena() {
    let mut w = ChipWorker::new(ChipOptions {
        cores: 2,
        prewarm: vec![RingSizing::default()],
        ..Default::default()
    })
    .unwrap();
    let prog = Program::new("fill", fill);
    let mut cfg = CallConfig::default();
    for f in RingField::ALL {
        cfg.runtime_env.set_all(f, RuntimeEnv::AUTO);
    }
    let mut x = vec![0f32; 16];
    let first = w.run(&prog, &[host(&mut x, &[16])], &cfg).unwrap();
    assert!(first.arena_hit);
    assert!(w
        .arena_stats()
        .resident
        .contains(&RingSizing::default().key()));
}

/// Device-resident tensors are charged: they evict idle arenas to fit, are refused when
/// they cannot, and an arena that does not fit beside them names them.
#[test]
fn device_resident_tensors_are_charged() {
    let small = sizing(16, 64 << 10, 64);
    let mut w = chip_with(32 << 20);
    let prog = Program::new("fill", fill);
    let mut x = vec![0f32; 16];
    w.run_with_sizing(&prog, &[host(&mut x, &[16])], &small)
        .unwrap();
    let e = w.hold_resident_tensors(64 << 20).unwrap_err();
    assert_eq!(e.code, StatusCode::DeviceOutOfMemory, "{e}");
    assert!(
        e.detail
            .contains("67108864 more bytes of device-resident tensors do not fit"),
        "{e}"
    );
    assert_eq!(
        w.arena_stats().resident,
        vec![small.key()],
        "nothing was evicted"
    );
    // 30 MiB resident: the small arena no longer fits beside it and is evicted.
    w.hold_resident_tensors(30 << 20).unwrap();
    assert_eq!(w.arena_stats().held_bytes, 30 << 20);
    let e = w
        .run_with_sizing(&prog, &[host(&mut x, &[16])], &sizing(16, 4 << 20, 64))
        .unwrap_err();
    assert_eq!(e.code, StatusCode::DeviceOutOfMemory, "{e}");
    assert!(
        e.detail.contains("device-resident tensors: 31457280 bytes"),
        "{e}"
    );
    w.run_with_sizing(&prog, &[host(&mut x, &[16])], &small)
        .unwrap();
}

/// "auto" where the defaults do not fit and the program needs a big heap on one ring:
/// the learning dispatch, shrunk to fit, fails for its heap; that heap grows (the other
/// entries shrink to make room) and the next dispatch learns; later ones run small.
#[test]
fn auto_learns_a_big_heap_under_a_tight_device_memory() {
    let big = Program::new("big_heap", |o, args| {
        let x = args[0].tensor()?;
        o.scope(|o| {
            // 24 live outputs of 4 MiB: 96 MiB on ring 1 at once.
            let mut outs = vec![];
            for _ in 0..24 {
                outs.push(
                    submit(o, FILL, |t| {
                        t.output(spec(&[1 << 20])).scalar(Scalar::F64(1.0));
                    })?
                    .output(0),
                );
            }
            submit(o, FILL, |t| {
                t.output_existing(x).scalar(Scalar::F64(3.0));
            })
            .map(|_| ())
        })
    });
    let mut w = chip_with(256 << 20);
    let mut cfg = CallConfig::default();
    for f in RingField::ALL {
        cfg.runtime_env.set_all(f, RuntimeEnv::AUTO);
    }
    let mut x = vec![0f32; 16];
    // A failed learning dispatch raises ring 1's heap (at least x2) and says so. Under a
    // device memory that does not hold the defaults the failure's "needed" is a lower
    // bound of what it saw, so it may take two.
    let mut failures = 0;
    loop {
        match w.run(&big, &[host(&mut x, &[16])], &cfg) {
            Ok(rep) => {
                assert!(rep.ring_sizing.heap[1] >= 96 << 20);
                break;
            }
            Err(e) => {
                let text = e.to_string();
                assert!(text.contains("auto: ring_heap[1] grows from"), "{text}");
                failures += 1;
                assert!(failures <= 2, "{text}");
            }
        }
    }
    assert!(failures >= 1);
    let third = w.run(&big, &[host(&mut x, &[16])], &cfg).unwrap();
    assert_eq!(third.ring_sizing.heap[1], 128 << 20);
    assert_eq!(third.ring_sizing.heap[0], 1024);
    assert!(third.device_memory.arena_bytes < 140 << 20);
    assert!(x.iter().all(|&v| v == 3.0));
    assert!(w.arena_stats().resident_bytes <= third.device_memory.arena_bytes);
}

/// "auto" under resident-tensor pressure: a learning dispatch that fails for capacity
/// and cannot grow within the memory left is DEVICE_OUT_OF_MEMORY naming the free bytes
/// and the holders; the next dispatch of the key is refused before anything runs, and
/// runs once the memory is back.
#[test]
fn auto_that_cannot_grow_is_device_out_of_memory_naming_the_holders() {
    let wide = Program::new("wide", |o, args| {
        let x = args[0].tensor()?;
        o.scope(|o| {
            for _ in 0..3000 {
                submit(o, FILL, |t| {
                    t.output(spec(&[16])).scalar(Scalar::F64(1.0));
                })?;
            }
            submit(o, FILL, |t| {
                t.output_existing(x).scalar(Scalar::F64(3.0));
            })
            .map(|_| ())
        })
    });
    let mut w = chip_with(64 << 20);
    w.hold_resident_tensors(60 << 20).unwrap();
    let mut cfg = CallConfig::default();
    for f in RingField::ALL {
        cfg.runtime_env.set_all(f, RuntimeEnv::AUTO);
    }
    let mut x = vec![0f32; 16];
    let Err(RunError::Failure(e)) = w.run(&wide, &[host(&mut x, &[16])], &cfg) else {
        panic!("the dispatch fits")
    };
    let text = e.to_string();
    assert_eq!(e.code, StatusCode::DeviceOutOfMemory, "{text}");
    assert!(
        text.contains("auto: ring_task_window[1] must grow from"),
        "{text}"
    );
    assert!(text.contains("of 67108864 are free (held: "), "{text}");
    assert!(
        text.contains("device-resident tensors: 62914560 bytes"),
        "{text}"
    );
    assert!(
        text.contains("the dispatch failed with SCOPE_DEADLOCK on ring 1"),
        "{text}"
    );
    // Refused before it runs: nothing is written.
    x.fill(0.0);
    let Err(RunError::Failure(e)) = w.run(&wide, &[host(&mut x, &[16])], &cfg) else {
        panic!("the dispatch is refused")
    };
    assert_eq!(e.code, StatusCode::DeviceOutOfMemory, "{e}");
    assert!(x.iter().all(|&v| v == 0.0));
    // The memory is back: the key learns and runs.
    w.hold_resident_tensors(0).unwrap();
    w.run(&wide, &[host(&mut x, &[16])], &cfg).unwrap();
    w.run(&wide, &[host(&mut x, &[16])], &cfg).unwrap();
    assert!(x.iter().all(|&v| v == 3.0));
}
