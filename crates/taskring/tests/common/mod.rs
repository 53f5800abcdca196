//! Helpers shared by the integration tests.
#![allow(dead_code)]

use taskring::*;

pub fn chip(cores: usize) -> ChipWorker {
    ChipWorker::new(ChipOptions { cores, ..Default::default() }).expect("chip")
}

pub fn sizing(window: u64, heap: u64, dep_pool: u64) -> RingSizing {
    RingSizing::uniform(window, heap, dep_pool).expect("valid sizing")
}

pub fn spec(shape: &[u32]) -> TensorSpec {
    TensorSpec::new(shape, DType::F32).unwrap()
}

pub fn submit(o: &mut Orchestrator<'_>, k: KernelRef, build: impl FnOnce(&mut TaskArgs)) -> Result<TaskOutputs, RuntimeFailure> {
    let mut a = TaskArgs::new();
    build(&mut a);
    o.submit(k, &a)
}

pub fn host<'a>(v: &'a mut [f32], shape: &[u32]) -> Arg<'a> {
    Arg::Tensor(HostTensor::f32(v, shape))
}
