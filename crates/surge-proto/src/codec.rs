//! Little-endian field encoding for message bodies: fixed-width integers,
//! length-prefixed strings and byte strings. Decoding never panics: every
//! read is bounds-checked and reports [`DecodeError`].

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The body ended before a field was complete.
    Truncated { wanted: usize, left: usize },
    /// A string field is not UTF-8.
    BadUtf8,
    /// A field holds a value outside its domain.
    BadValue(&'static str),
    /// Bytes remain after the last field.
    TrailingBytes(usize),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated { wanted, left } => {
                write!(f, "truncated body: field needs {wanted} bytes, {left} left")
            }
            DecodeError::BadUtf8 => f.write_str("string field is not UTF-8"),
            DecodeError::BadValue(what) => write!(f, "invalid value for {what}"),
            DecodeError::TrailingBytes(n) => write!(f, "{n} unexpected bytes after the body"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Appends fields to a body.
#[derive(Default)]
pub struct Encoder {
    pub buf: Vec<u8>,
}

impl Encoder {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// An IEEE 754 double, as its 64 bits.
    pub fn f64(&mut self, v: f64) -> &mut Self {
        self.u64(v.to_bits())
    }
    /// A byte string: `u32` length, then the bytes.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.buf.extend_from_slice(v);
        self
    }
    pub fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }
}

/// Reads fields from a body, front to back.
pub struct Decoder<'a> {
    rest: &'a [u8],
}

impl<'a> Decoder<'a> {
    pub fn new(body: &'a [u8]) -> Self {
        Decoder { rest: body }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.rest.len() < n {
            return Err(DecodeError::Truncated { wanted: n, left: self.rest.len() });
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    pub fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    pub fn f64(&mut self) -> Result<f64, DecodeError> {
        Ok(f64::from_bits(self.u64()?))
    }
    pub fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    pub fn str(&mut self) -> Result<&'a str, DecodeError> {
        std::str::from_utf8(self.bytes()?).map_err(|_| DecodeError::BadUtf8)
    }
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        Ok(self.take(N)?.try_into().unwrap())
    }
    /// True when every byte was read.
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }
    /// Everything not yet read (bulk data travels as the body's tail).
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.rest)
    }
    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes(self.rest.len()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_field_kind() {
        let mut e = Encoder::new();
        e.u8(7).u32(0xdead_beef).i32(-5).u64(u64::MAX).i64(-9).f64(-0.25).str("héllo").bytes(&[1, 2, 3]);
        let mut d = Decoder::new(&e.buf);
        assert_eq!(d.u8().unwrap(), 7);
        assert_eq!(d.u32().unwrap(), 0xdead_beef);
        assert_eq!(d.i32().unwrap(), -5);
        assert_eq!(d.u64().unwrap(), u64::MAX);
        assert_eq!(d.i64().unwrap(), -9);
        assert_eq!(d.f64().unwrap(), -0.25);
        assert_eq!(d.str().unwrap(), "héllo");
        assert_eq!(d.bytes().unwrap(), &[1, 2, 3]);
        d.finish().unwrap();
    }

    #[test]
    fn truncated_and_bogus_input_is_an_error_not_a_panic() {
        let mut d = Decoder::new(&[1, 0]);
        assert!(matches!(d.u32(), Err(DecodeError::Truncated { wanted: 4, left: 2 })));
        // A length prefix far beyond the body.
        let mut d = Decoder::new(&[0xff, 0xff, 0xff, 0x7f, b'a']);
        assert!(d.bytes().is_err());
        let mut d = Decoder::new(&[2, 0, 0, 0, 0xff, 0xfe]);
        assert_eq!(d.str(), Err(DecodeError::BadUtf8));
        let d = Decoder::new(&[1]);
        assert_eq!(d.finish(), Err(DecodeError::TrailingBytes(1)));
    }
}
