//! The fuzz input as a stream of field values.
//!
//! Every read takes bytes from the front and yields 0 once the input is
//! used up, so any byte string is a complete, finite script. Numbers that
//! the core compares with its own state (views, ops) are drawn *relative*
//! to a base the driver reads off the replica, so a mutation of one byte
//! moves a field to "one more than the replica's op" rather than to a random
//! 64-bit value; the encodings keep a way to the extremes (`MAX`, `MAX - 1`,
//! any raw value), where overflows live.

use cohort_messages::{Op, View};

/// The unread rest of the fuzz input.
pub struct Input<'a> {
    bytes: &'a [u8],
}

impl<'a> Input<'a> {
    /// The whole input, unread.
    pub fn new(bytes: &'a [u8]) -> Input<'a> {
        Input { bytes }
    }

    /// True once every byte was read.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The next byte (0 past the end).
    pub fn u8(&mut self) -> u8 {
        match self.bytes.split_first() {
            Some((&first, rest)) => {
                self.bytes = rest;
                first
            }
            None => 0,
        }
    }

    /// Up to `len_max_bytes` bytes (fewer at the end of the input).
    pub fn bytes(&mut self, len_max_bytes: usize) -> &'a [u8] {
        let len = len_max_bytes.min(self.bytes.len());
        let (head, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        head
    }

    /// A little-endian u32 from the next four bytes.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(std::array::from_fn(|_| self.u8()))
    }

    /// A little-endian u64 from the next eight bytes.
    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(std::array::from_fn(|_| self.u8()))
    }

    /// A bool from the low bit of the next byte.
    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    /// One byte's worth of choice among `count` (at least 1) options.
    pub fn choose(&mut self, count: usize) -> usize {
        usize::from(self.u8()) % count.max(1)
    }

    /// A view: mostly `base - 3 ..= base + 4`, else small absolute values,
    /// any raw value, or the two largest.
    pub fn view(&mut self, base: View) -> View {
        match self.u8() {
            0xFF => View(u32::MAX),
            0xFE => View(u32::MAX - 1),
            0xFD => View(self.u32()),
            byte @ 0x80.. => View(u32::from(byte & 0x3F)),
            byte => View(base.0.saturating_add(u32::from(byte & 7)).saturating_sub(3)),
        }
    }

    /// An op: as [`Input::view`], around `base`.
    pub fn op(&mut self, base: Op) -> Op {
        match self.u8() {
            0xFF => Op(u64::MAX),
            0xFE => Op(u64::MAX - 1),
            0xFD => Op(self.u64()),
            byte @ 0x80.. => Op(u64::from(byte & 0x3F)),
            byte => Op(base.0.saturating_add(u64::from(byte & 7)).saturating_sub(3)),
        }
    }

    /// A small count or offset, `0 ..= 15`, or (rarely) a raw u64.
    pub fn small_u64(&mut self) -> u64 {
        match self.u8() {
            0xFF => u64::MAX,
            0xFD => self.u64(),
            byte => u64::from(byte & 0x0F),
        }
    }
}
