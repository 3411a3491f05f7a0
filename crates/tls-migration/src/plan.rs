//! The migration as a plan: the preamble every reconcile applies to the desired DaemonSet, the
//! observation the state machine needs, and the completion steps in their order.

use canary_state_machine::{TemplateEdit, TlsFacts, tls_step};
use k8s_openapi::api::apps::v1::DaemonSet;

use crate::{
    InsertMode, TlsConfig, TlsError, detach_cert_secret, has_cert_volume, has_tls_flag,
    insert_tls_flag, supports_tls,
};

/// What [`apply_preamble`] or [`prepare_for_create`] changed in the desired DaemonSet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PreambleOutcome {
    /// The flag was added to the desired template (preamble: because the live one has it).
    pub kept_flag: bool,
    /// The certificate volume was removed from the desired template (preamble: because the
    /// live one no longer has it).
    pub kept_cert_removed: bool,
}

impl PreambleOutcome {
    /// Whether the desired DaemonSet was changed at all.
    #[must_use]
    pub fn changed(&self) -> bool {
        self.kept_flag || self.kept_cert_removed
    }
}

/// The preamble (reference section 6, (a) and (b)), applied to the freshly built desired
/// DaemonSet on every reconcile, before anything is compared or counted:
///
/// - (a) the flag is on the live template but not on the desired one: insert it into desired.
///   Once enforced, enforcement stays.
/// - (b) the certificate volume is gone from the live template but still in the desired one:
///   detach it from desired. Once removed, the volume never comes back while the migration is
///   enabled (neither rule looks at the support label, as in the reference).
///
/// Idempotent in both modes: (a) only inserts when desired lacks the flag.
///
/// # Errors
/// A missing or unselectable container in `live` or `desired`, or an invalid config; both
/// templates are checked before anything is changed, so on error `desired` is unchanged.
pub fn apply_preamble(
    live: &DaemonSet,
    desired: &mut DaemonSet,
    cfg: &TlsConfig,
) -> Result<PreambleOutcome, TlsError> {
    // Both templates are checked up front, so a malformed one is reported whatever the other.
    let live_has_flag = has_tls_flag(live, cfg)?;
    let desired_has_flag = has_tls_flag(desired, cfg)?;
    let mut outcome = PreambleOutcome::default();
    if live_has_flag && !desired_has_flag {
        outcome.kept_flag = insert_tls_flag(desired, cfg)?;
    }
    if !has_cert_volume(live, cfg) && has_cert_volume(desired, cfg) {
        outcome.kept_cert_removed = detach_cert_secret(desired, cfg)?;
    }
    Ok(outcome)
}

/// Reads the state machine's [`TlsFacts`] from the live DaemonSet and the desired one after
/// [`apply_preamble`]: the three booleans [`tls_step`] decides on.
///
/// # Errors
/// The live template has no containers or not the selected one, or an invalid config.
pub fn observe(
    live: &DaemonSet,
    desired_after_preamble: &DaemonSet,
    cfg: &TlsConfig,
) -> Result<TlsFacts, TlsError> {
    Ok(TlsFacts {
        supported: supports_tls(live, cfg),
        live_has_flag: has_tls_flag(live, cfg)?,
        desired_has_cert_volume: has_cert_volume(desired_after_preamble, cfg),
    })
}

/// Every completion step still to come, in order (the first is the state machine's
/// [`tls_step`], the one decision of which step comes next). Each one is a separate template
/// change, and so a separate rollout.
#[must_use]
pub fn remaining_steps(facts: &TlsFacts) -> Vec<TemplateEdit> {
    let mut facts = *facts;
    let mut steps = Vec::with_capacity(2);
    while let Some(step) = tls_step(facts) {
        steps.push(step);
        match step {
            TemplateEdit::InsertTlsFlag => facts.live_has_flag = true,
            TemplateEdit::DetachCertSecret => facts.desired_has_cert_volume = false,
        }
    }
    steps
}

/// Applies one completion step to the desired DaemonSet. Returns whether it changed.
///
/// In [`InsertMode::Idempotent`] applying a step twice equals applying it once. In
/// [`InsertMode::Reference`] [`TemplateEdit::InsertTlsFlag`] appends again every time (quirk 16).
///
/// # Errors
/// As [`insert_tls_flag`] and [`detach_cert_secret`]; on error `desired` is unchanged.
pub fn apply_step(
    desired: &mut DaemonSet,
    step: TemplateEdit,
    cfg: &TlsConfig,
) -> Result<bool, TlsError> {
    match step {
        TemplateEdit::InsertTlsFlag => insert_tls_flag(desired, cfg),
        TemplateEdit::DetachCertSecret => detach_cert_secret(desired, cfg),
    }
}

/// The create path (reference section 3, step 2): a DaemonSet that does not exist yet has no
/// old pods, so the whole migration is applied at once before it is created. Only a supported
/// DaemonSet is touched.
///
/// [`InsertMode::Reference`]: insert the flag and detach the volume only if desired lacks the
/// flag (a desired template that already has the flag keeps its volume until a later
/// completion step). [`InsertMode::Idempotent`]: ensure the flag and detach the volume, so the
/// created DaemonSet needs no further TLS rollout.
///
/// In the outcome, `kept_flag` means the flag was inserted, `kept_cert_removed` that the
/// volume was detached.
///
/// # Errors
/// As [`insert_tls_flag`] and [`detach_cert_secret`].
pub fn prepare_for_create(
    desired: &mut DaemonSet,
    cfg: &TlsConfig,
) -> Result<PreambleOutcome, TlsError> {
    if !supports_tls(desired, cfg) {
        return Ok(PreambleOutcome::default());
    }
    let has_flag = has_tls_flag(desired, cfg)?;
    if has_flag && cfg.insert == InsertMode::Reference {
        return Ok(PreambleOutcome::default());
    }
    let kept_flag = !has_flag && insert_tls_flag(desired, cfg)?;
    let kept_cert_removed = detach_cert_secret(desired, cfg)?;
    Ok(PreambleOutcome {
        kept_flag,
        kept_cert_removed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(supported: bool, live_has_flag: bool, desired_has_cert_volume: bool) -> TlsFacts {
        TlsFacts {
            supported,
            live_has_flag,
            desired_has_cert_volume,
        }
    }

    #[test]
    fn completion_order_is_flag_then_detach_then_finish() {
        use TemplateEdit::{DetachCertSecret, InsertTlsFlag as InsertFlag};
        let table = [
            (obs(false, false, false), vec![]),
            (obs(false, false, true), vec![]),
            (obs(false, true, false), vec![]),
            (obs(false, true, true), vec![]),
            (obs(true, false, false), vec![InsertFlag]),
            (obs(true, false, true), vec![InsertFlag, DetachCertSecret]),
            (obs(true, true, false), vec![]),
            (obs(true, true, true), vec![DetachCertSecret]),
        ];
        for (observation, expected) in table {
            assert_eq!(remaining_steps(&observation), expected, "{observation:?}");
            assert_eq!(
                tls_step(observation),
                expected.first().copied(),
                "{observation:?}"
            );
        }
    }
}
