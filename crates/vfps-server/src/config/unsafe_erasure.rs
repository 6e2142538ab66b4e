//! `VFPS_UNSAFE_ERASURE_*`: erasures made unsafe on purpose, for the
//! harness's self-test of P8 only (as `VFPS_UNSAFE_JOBS_RESTART_FROM_ZERO` is
//! for P7): each must make the harness fail. Off unless set.

use vfps_store::erasure::UnsafeErasure;

use super::env::{parse_bool, setting, Env};

pub(super) fn from_env(env: &Env, errors: &mut Vec<String>) -> UnsafeErasure {
    let mut flag = |key: &str| setting(env, errors, key, false, parse_bool, "true or false");
    UnsafeErasure {
        unannounced: flag("VFPS_UNSAFE_ERASURE_UNANNOUNCED"),
        before_standby: flag("VFPS_UNSAFE_ERASURE_BEFORE_STANDBY"),
    }
}
