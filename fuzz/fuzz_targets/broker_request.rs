//! Fuzzes the Slurm broker's request decoding: the frame reader and the
//! request decoder, exactly the functions the broker calls on bytes a
//! client sends. Neither may panic, allocate beyond the frame limit, or
//! accept a request that breaks a bound.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vs_runtime::broker::protocol::{
    FrameKind, MAX_FRAME, MAX_ITEMS, Request, decode_request, read_frame,
};

fuzz_target!(|data: &[u8]| {
    // The payload alone, as the broker decodes a request frame's body.
    check(decode_request(data));
    // The same bytes as a stream of frames, as they arrive on the socket.
    let mut r = data;
    while let Ok(frame) = read_frame(&mut r) {
        assert!(frame.payload.len() < MAX_FRAME);
        if frame.kind == FrameKind::Request {
            check(decode_request(&frame.payload));
        }
    }
});

fn check(result: Result<Request, vs_runtime::broker::protocol::ProtocolError>) {
    if let Ok(Request::Job { argv, env, .. }) = result {
        assert!(!argv.is_empty() && argv.len() <= MAX_ITEMS && env.len() <= MAX_ITEMS);
        assert!(env.keys().all(|k| !k.is_empty() && !k.contains('=')));
    }
}
