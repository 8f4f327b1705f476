//! Where a WebSocket client stands in the message it is sending, read off
//! the frame headers as the bytes arrive (RFC 6455 §5.2). The WebSocket
//! library assembles a fragmented message out of the server's sight; this
//! follows the same bytes so that an unfinished message can be held to a
//! time limit and its bytes to the server's body budget, as a request body
//! is. Pure: bytes in, state out; it trusts nothing it reads and never
//! fails (malformed frames are the library's to refuse).

/// The frame being read.
#[derive(Debug, Clone, Copy)]
enum Frame {
    /// Header bytes gathered so far (at most 14: 2, 8 of length, 4 of mask).
    Header { have: usize, bytes: [u8; 14] },
    /// Payload bytes left of a frame; `data` when it carries message
    /// bytes, `fin` when it is its message's last.
    Payload { left: u64, data: bool, fin: bool },
}

/// The state of one socket's incoming frames.
#[derive(Debug, Clone)]
pub struct Assembly {
    frame: Frame,
    /// A data message has begun and its last frame is not yet read whole.
    open: bool,
    /// Payload bytes of the open message read so far.
    held: u64,
    /// Data messages begun since the socket opened.
    begun: u64,
}

impl Default for Assembly {
    fn default() -> Self {
        Assembly {
            frame: Frame::Header {
                have: 0,
                bytes: [0; 14],
            },
            open: false,
            held: 0,
            begun: 0,
        }
    }
}

/// Opcodes of frames that carry message bytes: continuation, text, binary.
fn is_data(opcode: u8) -> bool {
    opcode <= 2
}

/// A header's length once its first two bytes are known.
fn header_len(b0_b1: [u8; 2]) -> usize {
    let ext = match b0_b1[1] & 0x7f {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    let mask = if b0_b1[1] & 0x80 != 0 { 4 } else { 0 };
    2 + ext + mask
}

impl Assembly {
    /// Whether a message has begun and not finished.
    pub fn open(&self) -> bool {
        self.open
    }

    /// Payload bytes of the unfinished message read so far (0 when none).
    pub fn held(&self) -> u64 {
        if self.open {
            self.held
        } else {
            0
        }
    }

    /// Payload bytes the unfinished message will hold once the frame
    /// being read is whole: what it holds and what the frame's header
    /// declares is still to come. A WebSocket library sets aside room for
    /// a frame's declared length as soon as it reads the header.
    pub fn promised(&self) -> u64 {
        match self.frame {
            Frame::Payload {
                left, data: true, ..
            } if self.open => self.held.saturating_add(left),
            _ => self.held(),
        }
    }

    /// Data messages begun since the socket opened: a change says the
    /// unfinished message (if any) is a new one.
    pub fn begun(&self) -> u64 {
        self.begun
    }

    /// Follow `bytes`, the next read off the socket.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let whole = match &mut self.frame {
                Frame::Header { have, bytes: head } => {
                    let want = if *have < 2 {
                        2
                    } else {
                        header_len([head[0], head[1]])
                    };
                    let take = (want - *have).min(bytes.len());
                    head[*have..*have + take].copy_from_slice(&bytes[..take]);
                    *have += take;
                    bytes = &bytes[take..];
                    // Two bytes say how long the rest of the header is.
                    *have == want && (*have > 2 || header_len([head[0], head[1]]) == 2)
                }
                Frame::Payload { left, data, .. } => {
                    let take = (*left).min(bytes.len() as u64);
                    *left -= take;
                    bytes = &bytes[take as usize..];
                    if *data {
                        self.held = self.held.saturating_add(take);
                    }
                    *left == 0
                }
            };
            match (whole, self.frame) {
                (true, Frame::Header { .. }) => self.header_read(),
                (true, Frame::Payload { .. }) => self.frame_read(),
                (false, _) => {}
            }
        }
    }

    fn header_read(&mut self) {
        let Frame::Header { bytes: head, .. } = self.frame else {
            return;
        };
        let (fin, opcode) = (head[0] & 0x80 != 0, head[0] & 0x0f);
        let left = match head[1] & 0x7f {
            126 => u16::from_be_bytes([head[2], head[3]]) as u64,
            127 => u64::from_be_bytes(head[2..10].try_into().unwrap_or([0; 8])),
            n => n as u64,
        };
        let data = is_data(opcode);
        if data && !self.open {
            self.open = true;
            self.held = 0;
            self.begun += 1;
        }
        self.frame = Frame::Payload { left, data, fin };
        if left == 0 {
            self.frame_read();
        }
    }

    fn frame_read(&mut self) {
        if let Frame::Payload {
            data: true,
            fin: true,
            ..
        } = self.frame
        {
            self.open = false;
            self.held = 0;
        }
        self.frame = Frame::Header {
            have: 0,
            bytes: [0; 14],
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A masked client frame.
    fn frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![(if fin { 0x80 } else { 0 }) | opcode];
        match payload.len() {
            n if n < 126 => f.push(0x80 | n as u8),
            n if n <= u16::MAX as usize => {
                f.push(0x80 | 126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                f.push(0x80 | 127);
                f.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        f.extend_from_slice(&[1, 2, 3, 4]);
        f.extend(
            payload
                .iter()
                .enumerate()
                .map(|(i, b)| b ^ [1, 2, 3, 4][i % 4]),
        );
        f
    }

    #[test]
    fn a_message_is_open_from_its_first_frame_to_its_last_whatever_the_reads() {
        let mut wire = frame(false, 1, &[b'a'; 300]);
        wire.extend(frame(true, 9, b"ping"));
        wire.extend(frame(false, 0, &[b'b'; 70_000]));
        let last = frame(true, 0, b"end");
        // Fed whole, and one byte at a time.
        for step in [wire.len(), 1, 7] {
            let mut a = Assembly::default();
            let mut fed = 0;
            for chunk in wire.chunks(step) {
                a.feed(chunk);
                fed += chunk.len();
                // Open once the first header (here 8 bytes) is read.
                assert_eq!(a.open(), fed >= 8, "{step}: {fed}");
            }
            assert_eq!(a.held(), 70_300);
            assert_eq!(a.promised(), 70_300);
            assert_eq!(a.begun(), 1);
            a.feed(&last);
            assert!(!a.open());
            assert_eq!(a.held(), 0);
        }
    }

    #[test]
    fn messages_one_after_another_each_begin_anew() {
        let mut a = Assembly::default();
        let mut wire = frame(true, 1, b"one");
        wire.extend(frame(true, 2, &[0; 200]));
        wire.extend(frame(false, 1, b"thr"));
        a.feed(&wire);
        assert!(a.open());
        assert_eq!((a.held(), a.begun()), (3, 3));
        a.feed(&frame(true, 0, b"ee"));
        assert!(!a.open());
        // A control frame alone opens nothing; an empty final frame closes.
        a.feed(&frame(true, 10, b""));
        assert!(!a.open());
        a.feed(&frame(false, 1, b""));
        assert!(a.open());
        a.feed(&frame(true, 0, b""));
        assert!(!a.open());
        assert_eq!(a.begun(), 4);
    }

    #[test]
    fn a_header_cut_anywhere_is_read_across_the_cut() {
        let wire = frame(true, 2, &[7; 65_536]);
        for cut in 0..14 {
            let mut a = Assembly::default();
            a.feed(&wire[..cut]);
            // Until its 14 header bytes are read, nothing is promised.
            assert_eq!((a.open(), a.promised()), (false, 0), "{cut}");
            a.feed(&wire[cut..wire.len() - 1]);
            assert!(a.open(), "{cut}");
            assert_eq!(a.held(), 65_535, "{cut}");
            // The header is read: the whole frame is promised.
            assert_eq!(a.promised(), 65_536, "{cut}");
            a.feed(&wire[wire.len() - 1..]);
            assert!(!a.open(), "{cut}");
        }
    }
}
