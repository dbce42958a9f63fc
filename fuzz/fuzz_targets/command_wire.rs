//! Fuzzes the Docker command server's wire: the blocking frame reader
//! the server runs on its stdin (bytes from the host), the chunked
//! decoder the host runs on the attach stream (bytes from inside the
//! container, where the agent may answer instead of the server), and the
//! JSON of both directions.
//!
//! Properties: both decoders see the same frames, whatever the chunking;
//! neither yields a frame over its bound; a request that decodes
//! re-encodes to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vs_docker::wire::{FrameDecoder, Reply, Request, read_frame};

const MAX: usize = 1 << 16;

fuzz_target!(|data: &[u8]| {
    let Some((&step, stream)) = data.split_first() else {
        return;
    };
    let mut r = stream;
    let mut expected = Vec::new();
    let reader_failed = loop {
        match read_frame(&mut r, MAX) {
            Ok(Some(body)) => {
                assert!(body.len() <= MAX);
                expected.push(body);
            }
            Ok(None) => break false,
            Err(_) => break true,
        }
    };

    let mut decoder = FrameDecoder::default();
    let mut got = Vec::new();
    let mut decoder_failed = false;
    for chunk in stream.chunks(usize::from(step) + 1) {
        match decoder.push(chunk, MAX) {
            Ok(frames) => got.extend(frames),
            Err(_) => {
                decoder_failed = true;
                break;
            }
        }
    }
    if decoder_failed {
        assert!(reader_failed, "only the chunked decoder refused the stream");
        assert!(expected.starts_with(&got));
    } else {
        assert_eq!(got, expected, "the two decoders disagree");
        assert_eq!(decoder.is_mid_frame(), reader_failed);
    }

    for body in &expected {
        assert!(body.len() <= MAX);
        if let Ok(request) = serde_json::from_slice::<Request>(body) {
            let again = serde_json::to_vec(&request).expect("a request encodes");
            let back: Request = serde_json::from_slice(&again).expect("re-encoded request decodes");
            assert_eq!(back, request);
        }
        let _ = serde_json::from_slice::<Reply>(body);
    }
});
