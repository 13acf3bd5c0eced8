//! Little-endian field access on fixed-size byte arrays.
//!
//! The callers pass arrays whose size is a compile-time constant and offsets
//! that are constants of their layout, so the slicing below cannot go out of
//! bounds for any input: the length checks happen once, where bytes from the
//! network become a fixed-size array.

#[inline]
pub(crate) fn get_u8<const N: usize>(buf: &[u8; N], at: usize) -> u8 {
    buf[at]
}

#[inline]
pub(crate) fn get_u16<const N: usize>(buf: &[u8; N], at: usize) -> u16 {
    let mut raw = [0u8; 2];
    raw.copy_from_slice(&buf[at..at + 2]);
    u16::from_le_bytes(raw)
}

#[inline]
pub(crate) fn get_u32<const N: usize>(buf: &[u8; N], at: usize) -> u32 {
    let mut raw = [0u8; 4];
    raw.copy_from_slice(&buf[at..at + 4]);
    u32::from_le_bytes(raw)
}

#[inline]
pub(crate) fn get_u64<const N: usize>(buf: &[u8; N], at: usize) -> u64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(raw)
}

#[inline]
pub(crate) fn get_u128<const N: usize>(buf: &[u8; N], at: usize) -> u128 {
    let mut raw = [0u8; 16];
    raw.copy_from_slice(&buf[at..at + 16]);
    u128::from_le_bytes(raw)
}

#[inline]
pub(crate) fn get_array<const N: usize, const M: usize>(buf: &[u8; N], at: usize) -> [u8; M] {
    let mut raw = [0u8; M];
    raw.copy_from_slice(&buf[at..at + M]);
    raw
}

#[inline]
pub(crate) fn is_zero<const N: usize>(buf: &[u8; N], at: usize, len: usize) -> bool {
    buf[at..at + len].iter().all(|byte| *byte == 0)
}

#[inline]
pub(crate) fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    buf[at..at + bytes.len()].copy_from_slice(bytes);
}
