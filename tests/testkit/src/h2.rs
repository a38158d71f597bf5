//! Raw HTTP/2 for tests that attack the coordinator below gRPC: frames,
//! the preface, a call's headers, half-open calls, and reading whether a
//! call was answered.

/// An HTTP/2 frame: length, type, flags, stream, payload.
pub fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[kind, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The client's HTTP/2 preface, its SETTINGS and the server's acknowledged.
pub fn h2_preface() -> Vec<u8> {
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(h2_frame(0x4, 0, 0, &[]));
    out.extend(h2_frame(0x4, 0x1, 0, &[]));
    out
}

/// The HEADERS frame that starts a gRPC call to `path` on `stream`:
/// :method POST, :scheme http, :path, content-type, te (HPACK literals,
/// no Huffman), and no END_STREAM: the body is to follow.
pub fn h2_call(path: &[u8], stream: u32) -> Vec<u8> {
    let mut h = vec![0x83, 0x86, 0x04, path.len() as u8];
    h.extend_from_slice(path);
    h.extend_from_slice(&[0x0f, 0x10, 16]);
    h.extend_from_slice(b"application/grpc");
    h.extend_from_slice(&[0x00, 2]);
    h.extend_from_slice(b"te");
    h.push(8);
    h.extend_from_slice(b"trailers");
    h2_frame(0x1, 0x4, stream, &h)
}

/// A connection that completes the HTTP/2 handshake, then opens `streams`
/// calls whose headers arrive and whose bodies never do, and idles.
pub fn half_open(addr: &str, streams: u32) -> Option<std::net::TcpStream> {
    use std::io::Write;
    let mut io = std::net::TcpStream::connect(addr).ok()?;
    let mut out = h2_preface();
    for i in 0..streams {
        out.extend(h2_call(b"/nqueens.v1.WorkerService/Report", 1 + 2 * i));
    }
    io.write_all(&out).ok()?;
    Some(io)
}

/// One HTTP/2 frame as read.
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

/// The next frame from `io`, or `None` once it ends.
pub fn read_frame(io: &mut impl std::io::Read) -> Option<Frame> {
    let mut head = [0u8; 9];
    io.read_exact(&mut head).ok()?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut payload = vec![0u8; len];
    io.read_exact(&mut payload).ok()?;
    Some(Frame {
        kind: head[3],
        flags: head[4],
        stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
        payload,
    })
}

/// Reads HTTP/2 frames from `io` until the server answers stream 1 with
/// its headers (true) or closes, resets or refuses it (false).
pub fn answered_on_stream_1(io: &mut std::net::TcpStream) -> bool {
    while let Some(f) = read_frame(io) {
        match (f.kind, f.stream) {
            (0x1, 1) => return true,
            (0x3, 1) | (0x7, _) => return false,
            _ => {}
        }
    }
    false
}
