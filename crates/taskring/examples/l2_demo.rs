//! L2 demo: a paged-attention-like decode run on one simulated chip under two ring
//! sizings, each given per dispatch through `CallConfig.runtime_env`.
//!
//! Per KV block: scores = Q · K_bᵀ (matmul), then one softmax over all blocks' scores,
//! then out += P_b · V_b (matmul_acc, an INOUT chain). Every block's work sits in its own
//! scope (ring 1), so the small sizing exercises back-pressure and reclamation.

use std::time::Instant;
use taskring::builtin::*;
use taskring::*;

const HEADS: u32 = 8;
const DIM: u32 = 64;
const BLOCK: u32 = 16;
const BLOCKS: u32 = 64;

fn decode_program() -> Program {
    Program::new("paged_attention_decode", |o, args| {
        let (q, kt, v, out) = (
            args[0].tensor()?,
            args[1].tensor()?,
            args[2].tensor()?,
            args[3].tensor()?,
        );
        let width = BLOCK * BLOCKS;
        let scores = o
            .alloc(&[TensorSpec::new(&[HEADS, width], DType::F32).unwrap()])?
            .output(0);
        for b in 0..BLOCKS {
            o.scope(|o| {
                let ktb = kt
                    .rows_slice((b * DIM) as u64, ((b + 1) * DIM) as u64)
                    .unwrap();
                let sb = scores
                    .view(&[HEADS, BLOCK], (b * BLOCK) as u64, Some(&[width, 1]))
                    .unwrap();
                let mut t = TaskArgs::new();
                t.input(q).input(ktb).output_existing(sb);
                o.submit(MATMUL, &t).map(|_| ())
            })?;
        }
        let mut t = TaskArgs::new();
        t.input(scores)
            .output(TensorSpec::new(&[HEADS, width], DType::F32).unwrap());
        let p = o.submit(SOFTMAX_ROWS, &t)?.output(0);
        let mut t = TaskArgs::new();
        t.output_existing(out).scalar(Scalar::F64(0.0));
        o.submit(FILL, &t)?;
        for b in 0..BLOCKS {
            o.scope(|o| {
                let pb = p
                    .view(&[HEADS, BLOCK], (b * BLOCK) as u64, Some(&[width, 1]))
                    .unwrap();
                let vb = v
                    .rows_slice((b * BLOCK) as u64, ((b + 1) * BLOCK) as u64)
                    .unwrap();
                // A small elementwise task on ring 2 beside the accumulation.
                o.scope(|o| {
                    let mut t = TaskArgs::new();
                    t.input(vb)
                        .output(TensorSpec::new(&[BLOCK, DIM], DType::F32).unwrap());
                    o.submit(EXP, &t).map(|_| ())
                })?;
                let mut t = TaskArgs::new();
                t.input(pb).input(vb).inout(out);
                o.submit(MATMUL_ACC, &t).map(|_| ())
            })?;
        }
        Ok(())
    })
}

fn reference(q: &[f32], kt: &[f32], v: &[f32]) -> Vec<f32> {
    let (h, d, n) = (HEADS as usize, DIM as usize, (BLOCK * BLOCKS) as usize);
    let mut out = vec![0f32; h * d];
    for i in 0..h {
        let s: Vec<f32> = (0..n)
            .map(|j| {
                let (b, r) = (j / BLOCK as usize, j % BLOCK as usize);
                (0..d)
                    .map(|c| q[i * d + c] * kt[(b * d + c) * BLOCK as usize + r])
                    .sum()
            })
            .collect();
        let m = s.iter().cloned().fold(f32::MIN, f32::max);
        let e: Vec<f32> = s.iter().map(|x| (x - m).exp()).collect();
        let z: f32 = e.iter().sum();
        for c in 0..d {
            out[i * d + c] = (0..n).map(|j| e[j] * v[j * d + c]).sum::<f32>() / z;
        }
    }
    out
}

fn main() {
    let mut q: Vec<f32> = (0..HEADS * DIM)
        .map(|i| ((i * 7) % 13) as f32 / 13.0 - 0.5)
        .collect();
    let mut kt: Vec<f32> = (0..BLOCKS * DIM * BLOCK)
        .map(|i| ((i * 5) % 11) as f32 / 11.0 - 0.5)
        .collect();
    let mut v: Vec<f32> = (0..BLOCKS * BLOCK * DIM)
        .map(|i| ((i * 3) % 17) as f32 / 17.0)
        .collect();
    let expect = reference(&q, &kt, &v);
    let mut out = vec![0f32; (HEADS * DIM) as usize];

    let prog = decode_program();
    let mut chip = ChipWorker::new(ChipOptions::default()).expect("chip");
    println!(
        "taskring L2 demo: {} on a chip with {} core threads",
        prog.name(),
        chip.cores().len()
    );

    let big = CallConfig::default();
    let mut small = CallConfig::default();
    small.runtime_env.ring_task_window = [16, 4, 4, 4];
    small.runtime_env.ring_heap = [256 << 10, 64 << 10, 64 << 10, 4096];
    small.runtime_env.ring_dep_pool = [64, 16, 16, 16];
    for (label, cfg) in [
        ("default sizing", &big),
        ("small per-ring sizing", &small),
        ("default sizing again", &big),
    ] {
        out.iter_mut().for_each(|x| *x = 0.0);
        let args = [
            Arg::Tensor(CallerTensor::f32(&mut q, &[HEADS, DIM])),
            Arg::Tensor(CallerTensor::f32(&mut kt, &[BLOCKS * DIM, BLOCK])),
            Arg::Tensor(CallerTensor::f32(&mut v, &[BLOCKS * BLOCK, DIM])),
            Arg::Tensor(CallerTensor::f32(&mut out, &[HEADS, DIM])),
        ];
        let t0 = Instant::now();
        let rep = match chip.run(&prog, &args, cfg) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{label}: run failed: {e}");
                std::process::exit(1);
            }
        };
        let wall = t0.elapsed();
        let err = out
            .iter()
            .zip(&expect)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        println!("\n== {label} ==");
        println!("{}", rep.ring_sizing);
        for r in 0..4 {
            println!(
                "  ring{r} peak: {:>5} slots  {:>9} heap bytes  {:>4} dep entries",
                rep.peak.task_window[r], rep.peak.heap[r], rep.peak.dep_pool[r]
            );
        }
        println!(
            "  tasks={} arena_hit={} arena_build={:.1} us elapsed={:.3} ms (wall {:.3} ms) max|err|={err:.2e}",
            rep.tasks,
            rep.arena_hit,
            rep.arena_build_s * 1e6,
            rep.elapsed_s * 1e3,
            wall.as_secs_f64() * 1e3
        );
        assert!(err < 1e-3, "result differs from the reference");
    }
    let st = chip.arena_stats();
    println!(
        "\narena cache: builds={} hits={} misses={} evictions={} resident={}",
        st.builds,
        st.hits,
        st.misses,
        st.evictions,
        st.resident.len()
    );
}
