//! Example programs through the public Rust API, checked against plain Rust references.

mod common;
use common::*;
use taskring::builtin::*;
use taskring::*;

#[test]
fn vector_add_in_a_scope() {
    let mut w = chip(2);
    let prog = Program::new("vector_add", |o, args| {
        let (a, b, out) = (args[0].tensor()?, args[1].tensor()?, args[2].tensor()?);
        o.scope(|o| {
            let tmp = submit(o, ADD, |t| {
                t.input(a).input(b).output(spec(&[4, 256]));
            })?
            .output(0);
            submit(o, SCALE, |t| {
                t.input(tmp).output_existing(out).scalar(Scalar::F64(2.0));
            })?;
            Ok(())
        })
    });
    let mut a: Vec<f32> = (0..1024).map(|i| i as f32).collect();
    let mut b: Vec<f32> = (0..1024).map(|i| (i * 3) as f32).collect();
    let mut out = vec![0f32; 1024];
    let expect: Vec<f32> = a.iter().zip(&b).map(|(x, y)| 2.0 * (x + y)).collect();
    let args = [
        host(&mut a, &[4, 256]),
        host(&mut b, &[4, 256]),
        host(&mut out, &[4, 256]),
    ];
    let rep = w
        .run_with_sizing(&prog, &args, &RingSizing::default())
        .unwrap();
    let _ = &args;
    assert_eq!(out, expect);
    assert_eq!(rep.tasks, 2);
    assert_eq!(rep.peak.task_window[1], 2);
    assert_eq!(rep.peak.heap[1], 4096);
    assert_eq!(rep.peak.task_window[0], 0);
}

#[test]
fn long_chain_through_window_4_completes() {
    // Each step in its own scope: back-pressure on ring 1 must never fail.
    let mut w = chip(2);
    let n = 20_000;
    let prog = Program::new("chain", move |o, args| {
        let x = args[0].tensor()?;
        for _ in 0..n {
            o.scope(|o| {
                submit(o, SCALE, |t| {
                    t.input(x).output_existing(x).scalar(Scalar::F64(1.0));
                })?;
                submit(o, ADD, |t| {
                    t.input(x).input(x).output(spec(&[16]));
                })?;
                Ok(())
            })?;
        }
        // An INOUT chain at depth 1.
        o.scope(|o| {
            for _ in 0..1000 {
                submit(o, SCALE, |t| {
                    t.input(x).inout(x).scalar(Scalar::F64(1.0));
                })?;
            }
            Ok(())
        })
    });
    let mut x = vec![1f32; 16];
    let args = [host(&mut x, &[16])];
    // Ring 1's window must hold the 1000-task scope; the chain scopes hold 2 tasks.
    let s = RingSizing::from_values([16, 4, 4, 4], [1 << 20, 4096, 1024, 1024], [64; 4])
        .unwrap_or_else(|e| panic!("{e}"));
    let r = w.run_with_sizing(&prog, &args, &s);
    // The 1000-task scope cannot fit a window of 4: it is a scope deadlock, reported.
    let e = r.unwrap_err();
    assert_eq!(e.code, StatusCode::ScopeDeadlock, "{e}");
    assert_eq!(e.ring, Some(1));

    // Without the big scope, the chain completes through window 4.
    let prog = Program::new("chain", move |o, args| {
        let x = args[0].tensor()?;
        for i in 0..n {
            o.scope(|o| {
                submit(o, SCALE, |t| {
                    t.input(x)
                        .output_existing(x)
                        .scalar(Scalar::F64(if i % 2 == 0 { 2.0 } else { 0.5 }));
                })?;
                Ok(())
            })?;
        }
        Ok(())
    });
    let rep = w.run_with_sizing(&prog, &args, &s).unwrap();
    assert_eq!(rep.tasks, n as u64);
    assert!(rep.peak.task_window[1] <= 3);
    let _ = &args;
    assert!(x.iter().all(|&v| v == 1.0), "{x:?}");
}

#[test]
fn diamond() {
    let mut w = chip(2);
    let prog = Program::new("diamond", |o, args| {
        let (a, out) = (args[0].tensor()?, args[1].tensor()?);
        o.scope(|o| {
            let top = submit(o, SCALE, |t| {
                t.input(a).output(spec(&[64])).scalar(Scalar::F64(3.0));
            })?
            .output(0);
            let l = submit(o, EXP, |t| {
                t.input(top).output(spec(&[64]));
            })?
            .output(0);
            let r = submit(o, SCALE, |t| {
                t.input(top).output(spec(&[64])).scalar(Scalar::F64(-1.0));
            })?
            .output(0);
            submit(o, ADD, |t| {
                t.input(l).input(r).output_existing(out);
            })?;
            Ok(())
        })
    });
    let mut a: Vec<f32> = (0..64).map(|i| i as f32 / 64.0).collect();
    let mut out = vec![0f32; 64];
    let expect: Vec<f32> = a.iter().map(|x| (3.0 * x).exp() - 3.0 * x).collect();
    for _ in 0..20 {
        let args = [host(&mut a, &[64]), host(&mut out, &[64])];
        w.run_with_sizing(&prog, &args, &sizing(8, 1 << 16, 16))
            .unwrap();
    }
    for (g, e) in out.iter().zip(&expect) {
        assert!((g - e).abs() < 1e-4 * e.abs().max(1.0), "{g} vs {e}");
    }
}

/// A paged-attention-like decode: per KV block, QK matmul -> online softmax -> PV.
#[test]
fn paged_attention_decode() {
    let (heads, dim, block, blocks) = (4usize, 16usize, 8usize, 6usize);
    let mut q: Vec<f32> = (0..heads * dim)
        .map(|i| ((i * 7) % 13) as f32 / 13.0 - 0.5)
        .collect();
    let k: Vec<f32> = (0..blocks * block * dim)
        .map(|i| ((i * 5) % 11) as f32 / 11.0 - 0.5)
        .collect();
    let mut v: Vec<f32> = (0..blocks * block * dim)
        .map(|i| ((i * 3) % 17) as f32 / 17.0)
        .collect();
    let mut kt = vec![0f32; blocks * dim * block]; // per block K^T: [dim, block]
    for b in 0..blocks {
        for r in 0..block {
            for c in 0..dim {
                kt[b * dim * block + c * block + r] = k[b * block * dim + r * dim + c];
            }
        }
    }
    let mut out = vec![0f32; heads * dim];
    // Reference: full softmax(q K^T) V.
    let mut expect = vec![0f32; heads * dim];
    for h in 0..heads {
        let s: Vec<f32> = (0..blocks * block)
            .map(|j| (0..dim).map(|c| q[h * dim + c] * k[j * dim + c]).sum())
            .collect();
        let m = s.iter().cloned().fold(f32::MIN, f32::max);
        let e: Vec<f32> = s.iter().map(|x| (x - m).exp()).collect();
        let z: f32 = e.iter().sum();
        for c in 0..dim {
            expect[h * dim + c] = (0..blocks * block)
                .map(|j| e[j] * v[j * dim + c])
                .sum::<f32>()
                / z;
        }
    }
    let bb = block as u32;
    let d = dim as u32;
    let hh = heads as u32;
    let prog = Program::new("decode", move |o, args| {
        let (q, kt, v, out) = (
            args[0].tensor()?,
            args[1].tensor()?,
            args[2].tensor()?,
            args[3].tensor()?,
        );
        // Scores for every block, then one softmax over all blocks' scores, then PV
        // accumulated block by block with matmul_acc (an INOUT chain).
        let scores = o.alloc(&[spec(&[hh, bb * blocks as u32])])?.output(0);
        for b in 0..blocks as u32 {
            o.scope(|o| {
                let ktb = kt
                    .rows_slice((b * d) as u64, ((b + 1) * d) as u64)
                    .map_err(|e| RuntimeFailure::invalid_args(None, e.to_string()))?;
                let sb = scores
                    .view(&[hh, bb], (b * bb) as u64, Some(&[bb * blocks as u32, 1]))
                    .unwrap();
                submit(o, MATMUL, |t| {
                    t.input(q).input(ktb).output_existing(sb);
                })?;
                Ok(())
            })?;
        }
        let p = submit(o, SOFTMAX_ROWS, |t| {
            t.input(scores).output(spec(&[hh, bb * blocks as u32]));
        })?
        .output(0);
        submit(o, FILL, |t| {
            t.output_existing(out).scalar(Scalar::F64(0.0));
        })?;
        for b in 0..blocks as u32 {
            o.scope(|o| {
                let pb = p
                    .view(&[hh, bb], (b * bb) as u64, Some(&[bb * blocks as u32, 1]))
                    .unwrap();
                let vb = v
                    .rows_slice((b * bb) as u64, ((b + 1) * bb) as u64)
                    .unwrap();
                submit(o, MATMUL_ACC, |t| {
                    t.input(pb).input(vb).inout(out);
                })?;
                Ok(())
            })?;
        }
        Ok(())
    });
    let mut w = chip(2);
    for s in [RingSizing::default(), sizing(4, 4096, 4)] {
        out.iter_mut().for_each(|x| *x = 0.0);
        let args = [
            host(&mut q, &[hh, d]),
            host(&mut kt, &[blocks as u32 * d, bb]),
            host(&mut v, &[blocks as u32 * bb, d]),
            host(&mut out, &[hh, d]),
        ];
        let rep = w.run_with_sizing(&prog, &args, &s).unwrap();
        let _ = &args;
        assert_eq!(rep.tasks, 1 + blocks as u64 + 2 + blocks as u64);
        for (g, e) in out.iter().zip(&expect) {
            assert!((g - e).abs() < 1e-4, "{g} vs {e}");
        }
    }
}

#[test]
fn dummy_and_explicit_deps_in_manual_scope() {
    let mut w = chip(2);
    let prog = Program::new("manual", |o, args| {
        let x = args[0].tensor()?;
        o.manual_scope(|o| {
            let a = submit(o, FILL, |t| {
                t.output_existing(x).scalar(Scalar::F64(5.0));
            })?;
            let barrier = {
                let mut t = TaskArgs::new();
                t.dep(a.id);
                o.submit_dummy(&t)?
            };
            submit(o, SCALE, |t| {
                t.input(x)
                    .output_existing(x)
                    .scalar(Scalar::F64(2.0))
                    .dep(barrier.id);
            })?;
            Ok(())
        })
    });
    for _ in 0..50 {
        let mut x = vec![0f32; 32];
        let args = [host(&mut x, &[32])];
        w.run_with_sizing(&prog, &args, &RingSizing::default())
            .unwrap();
        let _ = &args;
        assert!(x.iter().all(|&v| v == 10.0));
    }
}

/// A task may wait for any number of tasks: 200 fills of one row each, then a task
/// that depends on all of them explicitly (in a manual scope, where nothing is
/// inferred) sees every row written.
#[test]
fn a_task_waits_for_two_hundred_explicit_dependencies() {
    let mut w = chip(2);
    let prog = Program::new("fan_in", |o, args| {
        let x = args[0].tensor()?;
        let sum = args[1].tensor()?;
        o.manual_scope(|o| {
            let mut ids = Vec::with_capacity(200);
            for r in 0..200u32 {
                let row = x
                    .view(&[1, 4], r as u64 * 4, None)
                    .map_err(|e| RuntimeFailure::invalid_args(None, e.to_string()))?;
                ids.push(
                    submit(o, FILL, |t| {
                        t.output_existing(row).scalar(Scalar::F64(r as f64));
                    })?
                    .id,
                );
            }
            submit(o, COPY, |t| {
                t.input(x).output_existing(sum);
                for &id in &ids {
                    t.dep(id);
                }
            })?;
            Ok(())
        })
    });
    let mut x = vec![-1f32; 800];
    let mut out = vec![0f32; 800];
    let args = [host(&mut x, &[200, 4]), host(&mut out, &[200, 4])];
    w.run_with_sizing(&prog, &args, &RingSizing::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let _ = &args;
    let want: Vec<f32> = (0..800).map(|i| (i / 4) as f32).collect();
    assert_eq!(out, want);
}

#[test]
fn one_core_chip_runs_every_kind() {
    // A one-core chip's core is of kind Any: it must take AIC and AIV tasks too.
    let aiv = fn_kernel("aiv_only", CoreKind::Aiv, |_| {});
    let mut w = chip(1);
    let prog = Program::new("kinds", move |o, args| {
        let (a, c) = (args[0].tensor()?, args[1].tensor()?);
        o.scope(|o| {
            submit(o, MATMUL, |t| {
                t.input(a).input(a).output_existing(c);
            })?;
            o.submit(aiv, &TaskArgs::new()).map(|_| ())
        })
    });
    let mut a = vec![1f32; 4];
    let mut c = vec![0f32; 4];
    let args = [host(&mut a, &[2, 2]), host(&mut c, &[2, 2])];
    w.run_with_sizing(&prog, &args, &RingSizing::default())
        .unwrap();
    let _ = &args;
    assert_eq!(c, vec![2.0; 4]);
}

/// `TaskArgs::tensor(ArgTag::Output, t)` asks for a runtime output shaped like `t`: a new
/// contiguous buffer, whatever `t`'s address, strides and offset; the kernel and the
/// returned handle see the same tensor.
#[test]
fn tensor_tagged_output_is_a_runtime_output_of_its_shape() {
    use std::sync::Mutex;
    static SEEN: Mutex<Option<Tensor>> = Mutex::new(None);
    let record = fn_kernel("record", CoreKind::Any, |call| {
        *SEEN.lock().unwrap() = Some(call.tensors[0]);
    });
    let mut w = chip(1);
    let got: std::sync::Arc<Mutex<Option<Tensor>>> = Default::default();
    let g = got.clone();
    let prog = Program::new("tagged_output", move |o, args| {
        let x = args[0].tensor()?;
        // A strided view with an offset: every other element of the last 4.
        let strided = x
            .view(&[4], 1, Some(&[2]))
            .map_err(|e| RuntimeFailure::invalid_args(None, e.to_string()))?;
        let mut t = TaskArgs::new();
        t.tensor(ArgTag::Output, strided);
        let out = o.submit(record, &t)?;
        *g.lock().unwrap() = Some(out.output(0));
        Ok(())
    });
    let mut x = vec![0f32; 16];
    let args = [host(&mut x, &[16])];
    w.run_with_sizing(&prog, &args, &RingSizing::default())
        .unwrap();
    let out = got.lock().unwrap().unwrap();
    let seen = SEEN.lock().unwrap().unwrap();
    assert_eq!(out.shape(), &[4]);
    assert_eq!(out.strides(), &[1]);
    assert_eq!(out.offset, 0);
    assert_eq!(out.buf_bytes, 16);
    assert_ne!(
        out.addr,
        args[0].tensor().unwrap().addr,
        "a new buffer, not the view's"
    );
    assert_eq!(
        (
            seen.addr,
            seen.offset,
            seen.buf_bytes,
            seen.shape(),
            seen.strides()
        ),
        (
            out.addr,
            out.offset,
            out.buf_bytes,
            out.shape(),
            out.strides()
        )
    );
}
