//! Counters of rejected input, so every bad frame or entry is both an error
//! value and a metric. The runtime exports these; the simulator asserts on them.

use std::collections::BTreeMap;

use crate::error::{BodyError, EntryError, FrameError};

/// Counts of rejected frames, bodies and entries by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RejectCounters {
    /// Frames dropped, by [`FrameError::kind`].
    pub frames: BTreeMap<&'static str, u64>,
    /// Bodies dropped, by [`BodyError::kind`].
    pub bodies: BTreeMap<&'static str, u64>,
    /// Batch entries rejected, by reason.
    pub entries: BTreeMap<&'static str, u64>,
}

impl RejectCounters {
    /// Count a dropped frame.
    pub fn frame(&mut self, error: &FrameError) {
        *self.frames.entry(error.kind()).or_default() += 1;
    }

    /// Count a dropped body.
    pub fn body(&mut self, error: &BodyError) {
        *self.bodies.entry(error.kind()).or_default() += 1;
    }

    /// Count a rejected entry.
    pub fn entry(&mut self, error: &EntryError) {
        *self.entries.entry(error.kind()).or_default() += 1;
    }

    /// All rejections.
    pub fn total(&self) -> u64 {
        self.frames.values().chain(self.bodies.values()).chain(self.entries.values()).sum()
    }
}
