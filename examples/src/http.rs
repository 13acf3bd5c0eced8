//! A minimal HTTP/1.1 server side for the `kv` example, on tokio alone.
//!
//! One request per connection (the response says `Connection: close`), with
//! every size bounded: the request head ([`HEAD_SIZE_MAX_BYTES`]) and the
//! body ([`BODY_SIZE_MAX_BYTES`], from `Content-Length`; chunked bodies are
//! refused). Anything malformed is an [`HttpError`] that maps to a 4xx
//! status, never a panic. `Expect: 100-continue` (curl sends it for larger
//! bodies) is answered before the body is read.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The request line and headers may take this many bytes.
pub const HEAD_SIZE_MAX_BYTES: usize = 8 * 1024;
/// A body may take this many bytes.
pub const BODY_SIZE_MAX_BYTES: usize = 64 * 1024;

/// A parsed request.
///
/// ```
/// use cohort_examples::http::HttpRequest;
/// let request = HttpRequest { method: "GET".into(), path: "/kv/a".into(), body: Vec::new() };
/// assert!(request.path.starts_with("/kv/"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpRequest {
    /// `GET`, `PUT`, ...
    pub method: String,
    /// The request target, e.g. `/kv/name`.
    pub path: String,
    /// The body (empty without `Content-Length`).
    pub body: Vec<u8>,
}

/// Why a request could not be read; [`HttpError::status`] is the answer.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// Malformed: the reason.
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    /// The head exceeds [`HEAD_SIZE_MAX_BYTES`].
    #[error("request head larger than {HEAD_SIZE_MAX_BYTES} bytes")]
    HeadTooLarge,
    /// The body exceeds [`BODY_SIZE_MAX_BYTES`].
    #[error("body larger than {BODY_SIZE_MAX_BYTES} bytes")]
    BodyTooLarge,
    /// A body framing this server does not support.
    #[error("transfer-encoding is not supported: send Content-Length")]
    Unsupported,
    /// The connection failed or closed early.
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
}

impl HttpError {
    /// The status to answer with (`None`: the connection is gone).
    ///
    /// ```
    /// use cohort_examples::http::HttpError;
    /// assert_eq!(HttpError::BodyTooLarge.status(), Some((413, "Payload Too Large")));
    /// ```
    pub fn status(&self) -> Option<(u16, &'static str)> {
        match self {
            HttpError::BadRequest(_) => Some((400, "Bad Request")),
            HttpError::HeadTooLarge => Some((431, "Request Header Fields Too Large")),
            HttpError::BodyTooLarge => Some((413, "Payload Too Large")),
            HttpError::Unsupported => Some((501, "Not Implemented")),
            HttpError::Io(_) => None,
        }
    }
}

/// Read one request from `stream`, answering `Expect: 100-continue`.
///
/// ```
/// # actix_rt::System::new().block_on(async {
/// use cohort_examples::http::read_request;
/// let mut stream = tokio::io::join(&b"PUT /kv/a HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi"[..], tokio::io::sink());
/// let request = read_request(&mut stream).await.expect("valid");
/// assert_eq!((request.method.as_str(), request.path.as_str(), &request.body[..]), ("PUT", "/kv/a", &b"hi"[..]));
/// # });
/// ```
pub async fn read_request<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S) -> Result<HttpRequest, HttpError> {
    let mut buffer = Vec::with_capacity(1024);
    let head_end = loop {
        if let Some(at) = find(&buffer, b"\r\n\r\n") {
            break at;
        }
        if buffer.len() > HEAD_SIZE_MAX_BYTES {
            return Err(HttpError::HeadTooLarge);
        }
        let mut chunk = [0u8; 1024];
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Err(HttpError::BadRequest("connection closed before the end of the head"));
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    if head_end > HEAD_SIZE_MAX_BYTES {
        return Err(HttpError::HeadTooLarge);
    }
    let head = std::str::from_utf8(&buffer[..head_end]).map_err(|_| HttpError::BadRequest("head is not UTF-8"))?;
    let (method, path, headers) = parse_head(head)?;
    let length = body_length(&headers)?;
    if headers
        .iter()
        .any(|(name, value)| name.eq_ignore_ascii_case("expect") && value.eq_ignore_ascii_case("100-continue"))
    {
        stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
    }
    let mut body = buffer.split_off(head_end + 4);
    if body.len() > length {
        return Err(HttpError::BadRequest("more bytes than Content-Length"));
    }
    let already = body.len();
    body.resize(length, 0);
    stream.read_exact(&mut body[already..]).await?;
    Ok(HttpRequest { method, path, body })
}

/// Write a response with `body` and `Connection: close`.
///
/// ```
/// # actix_rt::System::new().block_on(async {
/// let mut out = Vec::new();
/// cohort_examples::http::write_response(&mut out, 404, "Not Found", b"no such key\n").await.expect("written");
/// assert!(out.starts_with(b"HTTP/1.1 404 Not Found\r\n"));
/// # });
/// ```
pub async fn write_response<W: AsyncWrite + Unpin>(
    stream: &mut W,
    status: u16,
    reason: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.flush().await
}

type Headers<'a> = Vec<(&'a str, &'a str)>;

fn parse_head(head: &str) -> Result<(String, String, Headers<'_>), HttpError> {
    let mut lines = head.split("\r\n");
    let request_line = lines.next().ok_or(HttpError::BadRequest("no request line"))?;
    let mut parts = request_line.split(' ');
    let (Some(method), Some(path), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HttpError::BadRequest("the request line is not `METHOD PATH VERSION`"));
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(HttpError::BadRequest("bad method"));
    }
    if !path.starts_with('/') || !version.starts_with("HTTP/1.") {
        return Err(HttpError::BadRequest("bad path or version"));
    }
    let headers = lines
        .map(|line| line.split_once(':').map(|(name, value)| (name.trim(), value.trim())))
        .collect::<Option<Vec<_>>>()
        .ok_or(HttpError::BadRequest("a header line without ':'"))?;
    Ok((method.to_string(), path.to_string(), headers))
}

fn body_length(headers: &Headers<'_>) -> Result<usize, HttpError> {
    if headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("transfer-encoding")) {
        return Err(HttpError::Unsupported);
    }
    let Some((_, value)) = headers.iter().find(|(name, _)| name.eq_ignore_ascii_case("content-length")) else {
        return Ok(0);
    };
    let length: usize = value.parse().map_err(|_| HttpError::BadRequest("bad Content-Length"))?;
    if length > BODY_SIZE_MAX_BYTES { Err(HttpError::BodyTooLarge) } else { Ok(length) }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn read(bytes: &[u8]) -> Result<HttpRequest, HttpError> {
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        runtime.block_on(async {
            let mut stream = tokio::io::join(bytes, tokio::io::sink());
            read_request(&mut stream).await
        })
    }

    #[test]
    fn a_get_without_body() {
        let request = read(b"GET /kv/x HTTP/1.1\r\nHost: a\r\n\r\n").expect("valid");
        assert_eq!((request.method.as_str(), request.path.as_str(), request.body.len()), ("GET", "/kv/x", 0));
    }

    #[test]
    fn limits_and_garbage_are_4xx() {
        let big = format!("PUT /kv/x HTTP/1.1\r\nContent-Length: {}\r\n\r\n", BODY_SIZE_MAX_BYTES + 1);
        assert_eq!(read(big.as_bytes()).err().and_then(|e| e.status()), Some((413, "Payload Too Large")));
        let long_head = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(HEAD_SIZE_MAX_BYTES));
        assert_eq!(read(long_head.as_bytes()).err().and_then(|e| e.status()).map(|s| s.0), Some(431));
        for garbage in
            [&b"\x00\xff\r\n\r\n"[..], b"GET\r\n\r\n", b"get / HTTP/1.1\r\n\r\n", b"GET / HTTP/1.1\r\nX\r\n\r\n"]
        {
            assert_eq!(read(garbage).err().and_then(|e| e.status()).map(|s| s.0), Some(400), "{garbage:?}");
        }
        let chunked = b"PUT /kv/x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(read(chunked).err().and_then(|e| e.status()).map(|s| s.0), Some(501));
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = read(&bytes);
        }
    }
}
