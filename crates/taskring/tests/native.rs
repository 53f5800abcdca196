//! Native (C ABI) kernels through the public Rust API: the example library of
//! `examples/native/` built with the system C compiler, run on the chip, compared with
//! the builtins; failures, signatures and load errors.

mod common;
use common::*;
use std::path::PathBuf;
use std::sync::OnceLock;
use taskring::builtin::*;
use taskring::*;

/// Build `examples/native/kernels.c` once into this test binary's temp dir, under a
/// name of this process's own: nextest runs each test in a process of its own, and
/// processes writing one file while another loads it made `dlopen` fail now and then.
fn library() -> &'static PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("libtrkernels_test.{}.so", std::process::id()));
        let st = std::process::Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args(["-O3", "-shared", "-fPIC", "-I"])
            .arg(root.join("include"))
            .arg("-o")
            .arg(&out)
            .arg(root.join("examples/native/kernels.c"))
            .arg("-lm")
            .status()
            .expect("a C compiler (cc)");
        assert!(st.success(), "building the example kernels failed");
        out
    })
}

fn native(symbol: &str) -> KernelRef {
    KernelRef::leak(NativeKernel::load(library(), symbol, CoreKind::Any).expect("load"))
}

/// c = softmax_rows(a @ b), with the given kernels.
fn matmul_softmax(mm: KernelRef, sm: KernelRef) -> Vec<f32> {
    let (m, k, n) = (8u32, 24u32, 40u32);
    let mut a: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7) % 19) as f32 / 19.0 - 0.5)
        .collect();
    let mut b: Vec<f32> = (0..k * n)
        .map(|i| ((i * 5) % 23) as f32 / 23.0 - 0.5)
        .collect();
    let mut c = vec![0f32; (m * n) as usize];
    let prog = Program::new("mm_softmax", move |o, args| {
        let (a, b, c) = (args[0].tensor()?, args[1].tensor()?, args[2].tensor()?);
        let s = submit(o, mm, |t| {
            t.input(a).input(b).output(spec(&[m, n]));
        })?
        .output(0);
        submit(o, sm, |t| {
            t.input(s).output_existing(c);
        })
        .map(|_| ())
    });
    let mut w = chip(2);
    let args = [
        host(&mut a, &[m, k]),
        host(&mut b, &[k, n]),
        host(&mut c, &[m, n]),
    ];
    w.run_with_sizing(&prog, &args, &RingSizing::default())
        .unwrap();
    let _ = &args;
    c
}

#[test]
fn native_kernels_compute_what_the_builtins_do() {
    let want = matmul_softmax(MATMUL, SOFTMAX_ROWS);
    let got = matmul_softmax(native("tr_matmul"), native("tr_softmax_rows"));
    for (g, e) in got.iter().zip(&want) {
        assert!((g - e).abs() <= 1e-5, "{g} vs {e}");
    }
}

#[test]
fn a_failing_native_kernel_fails_its_task_with_its_message() {
    let fail = native("tr_fail");
    let prog = Program::new("fails", move |o, args| {
        let a = args[0].tensor()?;
        submit(o, fail, |t| {
            t.inout(a);
        })
        .map(|_| ())
    });
    let mut w = chip(1);
    let mut a = vec![0f32; 4];
    let args = [host(&mut a, &[4])];
    let e = w
        .run_with_sizing(&prog, &args, &RingSizing::default())
        .unwrap_err();
    assert_eq!(e.code, StatusCode::TaskFailed);
    let text = e.to_string();
    assert!(
        text.contains("tr_fail")
            && text.contains("returned 3: bad block: 1 tensors is not what I wanted"),
        "{text}"
    );
    // the chip is usable afterwards
    let ok = native("tr_noop");
    let prog = Program::new("ok", move |o, _| submit(o, ok, |_| {}).map(|_| ()));
    w.run_with_sizing(&prog, &[], &RingSizing::default())
        .unwrap();
}

#[test]
fn a_signature_turns_wrong_arguments_into_invalid_args_at_submit() {
    let k = NativeKernel::load(library(), "tr_add", CoreKind::Any)
        .unwrap()
        .with_signature(NativeSignature {
            tensors: vec![
                TensorRule {
                    dtype: Some(DType::F32),
                    ndim: Some(1)
                };
                3
            ],
            scalars: Some(0),
        });
    let add = KernelRef::leak(k);
    let prog = Program::new("wrong", move |o, args| {
        let a = args[0].tensor()?;
        submit(o, add, |t| {
            t.input(a).output(spec(&[4]));
        })
        .map(|_| ())
    });
    let mut w = chip(1);
    let mut a = vec![0f32; 4];
    let args = [host(&mut a, &[4])];
    let e = w
        .run_with_sizing(&prog, &args, &RingSizing::default())
        .unwrap_err();
    assert_eq!(e.code, StatusCode::InvalidArgs);
    assert!(e.to_string().contains("takes 3 tensors, got 2"), "{e}");
}

#[test]
fn the_abi_limits_are_the_engines() {
    assert_eq!(taskring::native::MAX_TENSORS, taskring::MAX_TASK_TENSORS);
    assert_eq!(taskring::native::MAX_SCALARS, taskring::MAX_TASK_SCALARS);
}

#[test]
fn load_errors() {
    assert!(matches!(
        NativeKernel::load("/no/such/lib.so", "x", CoreKind::Aiv),
        Err(NativeKernelError::Library { .. })
    ));
    assert!(matches!(
        NativeKernel::load(library(), "tr_nothing", CoreKind::Aiv),
        Err(NativeKernelError::Symbol { .. })
    ));
}
