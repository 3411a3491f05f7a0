//! What the TLS migration looks for and where: label, flag, certificate volume, container, mode.

use crate::TlsError;

/// The label key that opts a DaemonSet into the TLS migration (reference value).
pub const REFERENCE_SUPPORT_LABEL: &str = "kubevirt.io/supports-migration-cn-types";
/// The label value that opts a DaemonSet in (reference value).
pub const REFERENCE_SUPPORT_VALUE: &str = "true";
/// The command-line flag the migration inserts (reference value).
pub const REFERENCE_FLAG: &str = "--migration-cn-types";
/// The argument that follows the flag (reference value).
pub const REFERENCE_FLAG_VALUE: &str = "migration";
/// The volume (and secret) name that is detached once the flag is rolled out (reference value).
pub const REFERENCE_CERT_VOLUME: &str = "kubevirt-virt-handler-certs";

/// Which container of the pod template carries the flag and the certificate mount.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ContainerSelector {
    /// The container at this position in `spec.template.spec.containers`.
    /// The reference always uses index 0.
    Index(usize),
    /// The container with this name. Prefer this: it survives a sidecar being prepended.
    Name(String),
}

impl Default for ContainerSelector {
    /// `Index(0)`, as the reference.
    fn default() -> Self {
        Self::Index(0)
    }
}

/// How faithfully the plan functions reproduce the reference (KubeVirt tree `44fb31793d^`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum InsertMode {
    /// Reproduce the reference quirk for quirk:
    /// - the flag is detected by substring (`migration-cn-types` anywhere in an argument,
    ///   so `--no-migration-cn-types` counts too), in `args` only;
    /// - a completion step appends the flag without checking whether the desired template
    ///   already has it (quirk 16: the flag can end up twice);
    /// - detaching removes the volume mount from the selected container only, even if other
    ///   containers mount the same volume (their pod spec is then invalid);
    /// - the create path inserts and detaches only when the flag is absent.
    Reference,
    /// Safe behaviour (the default):
    /// - the flag is detected as a whole token in `command` or `args`: `--flag`, `-flag`,
    ///   `--flag=value` and `-flag=value` count, `--flag-other` and `--no-flag` do not;
    /// - inserting is a no-op when the flag is already there, so it never duplicates;
    /// - detaching removes the volume and every mount of it, in every container, init
    ///   container and ephemeral container, so the pod spec stays valid;
    /// - the create path always ends with the flag present and the volume detached, since a
    ///   new DaemonSet has no old pods that could still need the secret.
    #[default]
    Idempotent,
}

/// Everything the TLS migration needs to know. [`TlsConfig::default`] gives the reference values
/// with [`InsertMode::Idempotent`]; [`TlsConfig::reference`] gives the reference values with
/// [`InsertMode::Reference`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TlsConfig {
    /// Label key on the DaemonSet **metadata** that opts it in.
    pub support_label: String,
    /// Label value that opts it in (compared exactly).
    pub support_value: String,
    /// Flag to insert, including its dashes, e.g. `--migration-cn-types`.
    pub flag: String,
    /// Argument appended after the flag. Empty: the flag is inserted alone.
    pub flag_value: String,
    /// Name of the pod volume (backed by the old certificate secret) to detach.
    pub cert_volume: String,
    /// Container that carries the flag and the certificate mount.
    pub container: ContainerSelector,
    /// Reference quirks or safe behaviour.
    pub insert: InsertMode,
}

impl Default for TlsConfig {
    fn default() -> Self {
        Self {
            support_label: REFERENCE_SUPPORT_LABEL.to_owned(),
            support_value: REFERENCE_SUPPORT_VALUE.to_owned(),
            flag: REFERENCE_FLAG.to_owned(),
            flag_value: REFERENCE_FLAG_VALUE.to_owned(),
            cert_volume: REFERENCE_CERT_VOLUME.to_owned(),
            container: ContainerSelector::default(),
            insert: InsertMode::Idempotent,
        }
    }
}

impl TlsConfig {
    /// The reference values in [`InsertMode::Reference`]: KubeVirt's behaviour, quirks included.
    #[must_use]
    pub fn reference() -> Self {
        Self {
            insert: InsertMode::Reference,
            ..Self::default()
        }
    }

    /// Checks the configuration itself, independently of any DaemonSet.
    ///
    /// # Errors
    /// [`TlsError::InvalidConfig`] if the flag has no name (empty or only dashes, which would
    /// match every argument), if the flag name contains `=` or whitespace, if the flag does
    /// not start with exactly one or two dashes, or if the certificate volume name is empty.
    pub fn validate(&self) -> Result<(), TlsError> {
        let name = self.flag_name();
        if name.is_empty() {
            return Err(TlsError::InvalidConfig {
                field: "flag",
                reason: "the flag has no name (empty or only dashes)",
            });
        }
        if name.contains('=') || name.contains(char::is_whitespace) {
            return Err(TlsError::InvalidConfig {
                field: "flag",
                reason: "the flag name must not contain '=' or whitespace",
            });
        }
        // The idempotent mode finds the flag as `-name` or `--name`: a flag spelled otherwise
        // would never be found once inserted, and would be inserted again at every step.
        if !(1..=2).contains(&(self.flag.len() - name.len())) {
            return Err(TlsError::InvalidConfig {
                field: "flag",
                reason: "the flag must start with one or two dashes (-name or --name)",
            });
        }
        if self.cert_volume.is_empty() {
            return Err(TlsError::InvalidConfig {
                field: "cert_volume",
                reason: "the certificate volume name is empty",
            });
        }
        Ok(())
    }

    /// The flag without its leading dashes, e.g. `migration-cn-types`: what the reference
    /// searches for as a substring.
    #[must_use]
    pub fn flag_name(&self) -> &str {
        self.flag.trim_start_matches('-')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_reference_values_with_idempotent_insert() {
        let cfg = TlsConfig::default();
        assert_eq!(cfg.support_label, "kubevirt.io/supports-migration-cn-types");
        assert_eq!(cfg.support_value, "true");
        assert_eq!(cfg.flag, "--migration-cn-types");
        assert_eq!(cfg.flag_value, "migration");
        assert_eq!(cfg.cert_volume, "kubevirt-virt-handler-certs");
        assert_eq!(cfg.container, ContainerSelector::Index(0));
        assert_eq!(cfg.insert, InsertMode::Idempotent);
        assert_eq!(TlsConfig::reference().insert, InsertMode::Reference);
        assert_eq!(cfg.validate(), Ok(()));
    }

    #[test]
    fn flag_name_strips_dashes() {
        assert_eq!(TlsConfig::default().flag_name(), "migration-cn-types");
    }

    #[test]
    fn validate_rejects_nameless_flag_and_empty_volume() {
        for flag in ["", "-", "--", "--a=b", "--a b"] {
            let cfg = TlsConfig {
                flag: flag.to_owned(),
                ..TlsConfig::default()
            };
            assert!(
                matches!(
                    cfg.validate(),
                    Err(TlsError::InvalidConfig { field: "flag", .. })
                ),
                "{flag:?} accepted"
            );
        }
        let cfg = TlsConfig {
            cert_volume: String::new(),
            ..TlsConfig::default()
        };
        assert!(matches!(
            cfg.validate(),
            Err(TlsError::InvalidConfig {
                field: "cert_volume",
                ..
            })
        ));
    }
}
