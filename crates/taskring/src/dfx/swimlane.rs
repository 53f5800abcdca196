//! The swimlane (`CallConfig.enable_chip_swimlane`): each core's kernel executions of a
//! run, kept in chunks while it runs and written as Chrome trace events
//! (`merged_swimlane.json`).

use std::path::{Path, PathBuf};

/// One kernel execution on a core (`CallConfig.enable_chip_swimlane`): 40 bytes, kept
/// in memory until the run ends (a task is one event).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SwimlaneEvent {
    pub task: u64,
    /// Nanoseconds since the run started.
    pub start_ns: u64,
    pub kernel: &'static str,
    /// Nanoseconds the kernel ran (saturating at about 4.3 s).
    pub dur_ns: u32,
    pub core: u32,
}

/// One core's events of a run, in chunks of [`Lane::CHUNK`] that never move: memory
/// is 40 bytes an event plus at most one chunk (no doubling, no copy on growth).
#[derive(Default)]
pub(crate) struct Lane {
    chunks: Vec<Vec<SwimlaneEvent>>,
}

impl Lane {
    pub const CHUNK: usize = 4096;

    pub fn push(&mut self, e: SwimlaneEvent) {
        match self.chunks.last_mut() {
            Some(c) if c.len() < Self::CHUNK => c.push(e),
            _ => {
                let mut c = Vec::with_capacity(Self::CHUNK);
                c.push(e);
                self.chunks.push(c);
            }
        }
    }

    pub fn clear(&mut self) {
        self.chunks.clear();
    }

    /// The events, leaving the lane empty.
    pub fn take(&mut self) -> impl Iterator<Item = SwimlaneEvent> {
        std::mem::take(&mut self.chunks).into_iter().flatten()
    }
}

/// Write `<prefix>/merged_swimlane.json` (Chrome trace events; opens in Perfetto),
/// streamed event by event: the file costs no memory beyond the events themselves.
pub(crate) fn write_swimlane(
    prefix: &Path,
    events: impl IntoIterator<Item = SwimlaneEvent>,
    core_names: &[String],
) -> std::io::Result<PathBuf> {
    use std::io::Write;
    std::fs::create_dir_all(prefix)?;
    let path = prefix.join("merged_swimlane.json");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
    f.write_all(b"{\"traceEvents\":[")?;
    let mut first = true;
    let mut sep = |f: &mut std::io::BufWriter<std::fs::File>| {
        let s: &[u8] = if first { b"" } else { b"," };
        first = false;
        f.write_all(s)
    };
    for (i, n) in core_names.iter().enumerate() {
        sep(&mut f)?;
        write!(
            f,
            "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":{i},\"args\":{{\"name\":"
        )?;
        serde_json::to_writer(&mut f, n)?;
        f.write_all(b"}}")?;
    }
    for e in events {
        sep(&mut f)?;
        f.write_all(b"{\"name\":")?;
        serde_json::to_writer(&mut f, e.kernel)?;
        write!(f, ",\"ph\":\"X\",\"pid\":0,\"tid\":{},\"ts\":", e.core)?;
        serde_json::to_writer(&mut f, &(e.start_ns as f64 / 1000.0))?;
        f.write_all(b",\"dur\":")?;
        serde_json::to_writer(&mut f, &(e.dur_ns as f64 / 1000.0))?;
        write!(
            f,
            ",\"args\":{{\"task\":\"{:?}\",\"ring\":{}}}}}",
            crate::tensor::TaskId(e.task),
            e.task >> 32
        )?;
    }
    f.write_all(b"],\"displayTimeUnit\":\"ns\"}")?;
    f.flush()?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swimlane_event_is_40_bytes_and_the_file_parses() {
        assert_eq!(std::mem::size_of::<SwimlaneEvent>(), 40);
        let dir = std::env::temp_dir().join(format!("taskring-swim-{}", std::process::id()));
        let ev = [SwimlaneEvent {
            task: (1 << 32) | 5,
            start_ns: 1500,
            kernel: "k\"$x$\\",
            dur_ns: 2500,
            core: 1,
        }];
        let names = ["core 0 (AIC)".to_string(), "core \"1\"".to_string()];
        let path = write_swimlane(&dir, ev, &names).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let evs = v["traceEvents"].as_array().unwrap();
        assert_eq!(evs.len(), 3);
        assert_eq!(evs[1]["args"]["name"], "core \"1\"");
        let x = &evs[2];
        assert_eq!(x["name"], "k\"$x$\\");
        assert_eq!(
            (x["ts"].as_f64(), x["dur"].as_f64()),
            (Some(1.5), Some(2.5))
        );
        assert_eq!(x["tid"], 1);
        assert_eq!(x["args"]["ring"], 1);
        assert_eq!(x["args"]["task"], "task(ring=1, local=5)");
        assert_eq!(v["displayTimeUnit"], "ns");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
