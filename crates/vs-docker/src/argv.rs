//! Arguments as the Engine API carries them: UTF-8 strings without NUL.

use std::ffi::OsString;

use vs_sandbox::runner::RunnerError;

pub(super) fn to_strings(argv: &[OsString]) -> Result<Vec<String>, RunnerError> {
    if argv.is_empty() {
        return Err(RunnerError::EmptyCommand);
    }
    argv.iter()
        .map(|a| {
            let s = a.to_str().ok_or_else(|| RunnerError::NulByte {
                what: "argument (not UTF-8, which the Engine API cannot carry)",
                value: a.to_string_lossy().into_owned(),
            })?;
            if s.contains('\0') {
                return Err(RunnerError::NulByte {
                    what: "argument",
                    value: s.to_owned(),
                });
            }
            Ok(s.to_owned())
        })
        .collect()
}
