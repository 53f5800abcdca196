//! `deps.json` (`CallConfig.enable_dep_gen`, `docs/api.md` §7): every field of a program with a
//! chain through a runtime output, tensormap edges through views of host arrays, an
//! explicit dependency across rings, a manual scope and an output-only allocation.

mod common;
use common::*;
use std::sync::{Arc, Mutex};
use taskring::builtin::*;
use taskring::dfx::{DepsArg, DepsEdge, DepsFile, DepsTensor};
use taskring::*;

fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "taskring-{tag}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const R1: u64 = 1 << 32;
const R2: u64 = 2 << 32;

/// Runtime output addresses seen by the program: `a` (task A's output), `f` (alloc).
type Seen = Arc<Mutex<Vec<u64>>>;

/// x, y: host [8, 64] f32.
///
/// ```text
/// root (scope 0, ring 0)
///   A  = copy   in x[0:4]             -> OUTPUT a [4, 64]
///   scope (scope 1, ring 1)
///     B = scale in a                  -> OUTPUT_EXISTING y[4:8]
///     C = noop  no_dep a, in y[4:8], in y[0:4]    (args out of canonical order)
///     manual scope (scope 2, ring 2)
///       D = noop inout y[4:8], dep_wait(B)         (nothing inferred)
///   (sleep: B and C complete and retire)
///   E  = noop   inout y, dep(A)
///   F  = alloc  [16]
///   G  = noop   in y[2:3], in f, dep_wait(D)
/// ```
fn program(seen: Seen) -> Program {
    Program::new("deps", move |o, args| {
        let (x, y) = (args[0].tensor()?, args[1].tensor()?);
        let rows = |t: &Tensor, a, b| t.rows_slice(a, b).unwrap();
        let a_task = submit(o, COPY, |t| {
            t.input(rows(&x, 0, 4)).output(spec(&[4, 64]));
        })?;
        let a = a_task.output(0);
        seen.lock().unwrap().push(a.addr);
        let d_id = o.scope(|o| {
            let b = submit(o, SCALE, |t| {
                t.input(a)
                    .output_existing(rows(&y, 4, 8))
                    .scalar(Scalar::F64(2.0));
            })?;
            submit(o, NOOP, |t| {
                t.no_dep(a).input(rows(&y, 4, 8)).input(rows(&y, 0, 4));
            })?;
            o.manual_scope(|o| {
                submit(o, NOOP, |t| {
                    t.inout(rows(&y, 4, 8)).dep_wait(b.id);
                })
                .map(|d| d.id)
            })
        })?;
        std::thread::sleep(std::time::Duration::from_millis(50));
        submit(o, NOOP, |t| {
            t.inout(y).dep(a_task.id);
        })?;
        let f = o.alloc(&[spec(&[16])])?.output(0);
        seen.lock().unwrap().push(f.addr);
        submit(o, NOOP, |t| {
            t.input(rows(&y, 2, 3)).input(f).dep_wait(d_id);
        })
        .map(|_| ())
    })
}

fn arg(idx: u32, tag: &str, tensor: u32, shape: &[u32], offset: u64) -> DepsArg {
    DepsArg {
        idx,
        tag: tag.into(),
        tensor,
        shape: shape.to_vec(),
        dtype: "float32".into(),
        offset,
    }
}

fn edge(pred: u64, succ: u64, source: &str, flags: &[&str]) -> DepsEdge {
    DepsEdge {
        pred,
        succ,
        source: source.into(),
        flags: flags.iter().map(|s| s.to_string()).collect(),
    }
}

fn run_once(
    w: &mut ChipWorker,
    x: &mut [f32],
    y: &mut [f32],
    dir: &std::path::Path,
) -> (serde_json::Value, Vec<u64>) {
    let seen: Seen = Arc::default();
    let prog = program(seen.clone());
    let mut cfg = CallConfig::default();
    cfg.enable_dep_gen = true;
    cfg.output_prefix = dir.to_string_lossy().into_owned();
    let args = [host(x, &[8, 64]), host(y, &[8, 64])];
    w.run(&prog, &args, &cfg).unwrap();
    let text = std::fs::read_to_string(dir.join("deps.json")).unwrap();
    let v = seen.lock().unwrap().clone();
    (serde_json::from_str(&text).unwrap(), v)
}

#[test]
fn every_field() {
    let dir = tempdir("deps-json");
    let mut w = chip(2);
    let mut x = vec![1f32; 512];
    let mut y = vec![0f32; 512];
    let (xa, ya) = (x.as_ptr() as u64, y.as_ptr() as u64);
    let (raw, seen) = run_once(&mut w, &mut x, &mut y, &dir);

    // The keys are exactly the contract's.
    let keys = |v: &serde_json::Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k.join(",")
    };
    assert_eq!(keys(&raw), "edges,tasks,tensors");
    assert_eq!(keys(&raw["tasks"][0]), "args,id,kernel,ring,scope");
    assert_eq!(
        keys(&raw["tasks"][0]["args"][0]),
        "dtype,idx,offset,shape,tag,tensor"
    );
    assert_eq!(keys(&raw["tensors"][0]), "addr,dtype,id,numel");
    assert_eq!(keys(&raw["edges"][0]), "flags,pred,source,succ");

    let f: DepsFile = serde_json::from_value(raw.clone()).unwrap();
    let (a_addr, f_addr) = (seen[0], seen[1]);
    assert!(a_addr != 0 && f_addr != 0 && a_addr != f_addr);
    assert_eq!(
        f.tensors,
        vec![
            DepsTensor {
                id: 0,
                addr: xa,
                dtype: "float32".into(),
                numel: 512
            },
            DepsTensor {
                id: 1,
                addr: a_addr,
                dtype: "float32".into(),
                numel: 256
            },
            DepsTensor {
                id: 2,
                addr: ya,
                dtype: "float32".into(),
                numel: 512
            },
            DepsTensor {
                id: 3,
                addr: f_addr,
                dtype: "float32".into(),
                numel: 16
            },
        ]
    );

    let (a, e, ff, g, b, c, d) = (0, 1, 2, 3, R1, R1 | 1, R2);
    let ids: Vec<u64> = f.tasks.iter().map(|t| t.id).collect();
    assert_eq!(ids, vec![a, e, ff, g, b, c, d], "ordered by id");
    let summary: Vec<(&str, u32, u32)> = f
        .tasks
        .iter()
        .map(|t| (t.kernel.as_str(), t.ring, t.scope))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("copy", 0, 0),
            ("noop", 0, 0),
            ("alloc", 0, 0),
            ("noop", 0, 0),
            ("scale", 1, 1),
            ("noop", 1, 1),
            ("noop", 2, 2)
        ]
    );
    let args: Vec<&Vec<DepsArg>> = f.tasks.iter().map(|t| &t.args).collect();
    assert_eq!(
        *args[0],
        vec![
            arg(0, "INPUT", 0, &[4, 64], 0),
            arg(1, "OUTPUT", 1, &[4, 64], 0)
        ]
    );
    assert_eq!(*args[1], vec![arg(0, "INOUT", 2, &[8, 64], 0)]);
    assert_eq!(*args[2], vec![arg(0, "OUTPUT", 3, &[16], 0)]);
    assert_eq!(
        *args[3],
        vec![
            arg(0, "INPUT", 2, &[1, 64], 128),
            arg(1, "INPUT", 3, &[16], 0)
        ]
    );
    assert_eq!(
        *args[4],
        vec![
            arg(0, "INPUT", 1, &[4, 64], 0),
            arg(1, "OUTPUT_EXISTING", 2, &[4, 64], 256)
        ]
    );
    // In argument order, not the engine's canonical order (inputs before no_dep).
    assert_eq!(
        *args[5],
        vec![
            arg(0, "NO_DEP", 1, &[4, 64], 0),
            arg(1, "INPUT", 2, &[4, 64], 256),
            arg(2, "INPUT", 2, &[4, 64], 0)
        ]
    );
    assert_eq!(*args[6], vec![arg(0, "INOUT", 2, &[4, 64], 256)]);

    let (wr, w_) = (&["wait", "retain"][..], &["wait"][..]);
    assert_eq!(
        f.edges,
        vec![
            // E: explicit dep(A); B wrote y[4:8], which E's INOUT y covers (B has retired
            // by then: the engine had nothing to wait for, the edge is still listed).
            edge(a, e, "explicit", wr),
            edge(b, e, "tensormap", w_),
            // G: E wrote y (B's entry was covered by E's INOUT), F allocated f, dep_wait(D).
            // D's INOUT in the manual scope is not a writer.
            edge(e, g, "tensormap", w_),
            edge(ff, g, "tensormap", wr),
            edge(d, g, "explicit", w_),
            // B: creator of a.
            edge(a, b, "tensormap", wr),
            // C: creator of a (through NO_DEP), B wrote y[4:8]; y[0:4] has no writer.
            edge(a, c, "tensormap", wr),
            edge(b, c, "tensormap", w_),
            // D (manual scope): only its explicit dep, though it overlaps B's write.
            edge(b, d, "explicit", w_),
        ]
    );

    // Deterministic: a second run writes the same file.
    let (raw2, _) = run_once(&mut w, &mut x, &mut y, &dir);
    assert_eq!(raw, raw2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn explicit_and_inferred_are_separate_edges_and_wait_retain_merge() {
    // T0 writes x; T1 reads x and also declares dep(T0) twice (once WAIT only): one
    // explicit edge [wait, retain] and one tensormap edge [wait].
    let dir = tempdir("deps-json-merge");
    let prog = Program::new("merge", |o, args| {
        let x = args[0].tensor()?;
        let t0 = submit(o, FILL, |t| {
            t.output_existing(x).scalar(Scalar::F64(3.0));
        })?;
        submit(o, NOOP, |t| {
            t.input(x).dep_wait(t0.id).dep(t0.id);
        })
        .map(|_| ())
    });
    let mut w = chip(1);
    let mut cfg = CallConfig::default();
    cfg.enable_dep_gen = true;
    cfg.output_prefix = dir.to_string_lossy().into_owned();
    let mut x = vec![0f32; 64];
    let args = [host(&mut x, &[64])];
    w.run(&prog, &args, &cfg).unwrap();
    let f: DepsFile =
        serde_json::from_str(&std::fs::read_to_string(dir.join("deps.json")).unwrap()).unwrap();
    assert_eq!(
        f.edges,
        vec![
            edge(0, 1, "explicit", &["wait", "retain"]),
            edge(0, 1, "tensormap", &["wait"])
        ]
    );
    assert_eq!(
        f.tasks[0].args,
        vec![arg(0, "OUTPUT_EXISTING", 0, &[64], 0)]
    );
    assert!(x.iter().all(|&v| v == 3.0));
    let _ = std::fs::remove_dir_all(&dir);
}
