//! What a failed TLS handshake means, in words that say which certificate was wrong and how:
//! expired, not yet valid, signed by a CA the configuration does not trust, or for another
//! name; or refused by the other side for one of those reasons.

use rustls::{AlertDescription, CertificateError, Error};

/// `error` from a handshake with `peer` (as a person would name it: "the standby at
/// 127.0.0.1:6392", say), which was expected to prove `expected`.
pub fn describe(error: &Error, peer: &str, expected: &str) -> String {
    match error {
        Error::InvalidCertificate(_) => {
            format!(
                "TLS: {}",
                describe_certificate_error(
                    error,
                    &format!("the certificate of {peer}"),
                    expected,
                    "tls.ca_file"
                )
            )
        }
        Error::NoCertificatesPresented => format!("TLS: {peer} presented no certificate"),
        Error::AlertReceived(alert) => {
            let why = match alert {
                AlertDescription::CertificateExpired => "it has expired",
                AlertDescription::UnknownCA => "it is not signed by a CA that side trusts",
                AlertDescription::BadCertificate | AlertDescription::CertificateUnknown => {
                    "it is not valid there (wrong name, or not trusted)"
                }
                AlertDescription::CertificateRequired => "it requires a certificate",
                AlertDescription::AccessDenied => "access denied",
                _ => "",
            };
            if why.is_empty() {
                format!("TLS: {peer} ended the handshake ({alert:?})")
            } else {
                format!("TLS: {peer} refused this process's certificate: {why} ({alert:?})")
            }
        }
        other => format!("TLS with {peer}: {other}"),
    }
}

/// A certificate error as a sentence about `whose` certificate, which should prove
/// `expected` and chain to the CA in `ca_field`.
pub fn describe_certificate_error(
    error: &Error,
    whose: &str,
    expected: &str,
    ca_field: &str,
) -> String {
    let Error::InvalidCertificate(error) = error else {
        return format!("{whose}: {error}");
    };
    match error {
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            format!("{whose} has expired ({error:?})")
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            format!("{whose} is not valid yet ({error:?})")
        }
        CertificateError::UnknownIssuer => {
            format!("{whose} is not signed by the CA this configuration trusts ({ca_field})")
        }
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            format!("{whose} is not a certificate for '{expected}' (its names do not include it)")
        }
        CertificateError::BadSignature => format!("{whose} has a bad signature"),
        CertificateError::Revoked => format!("{whose} has been revoked"),
        other => format!("{whose} is not acceptable ({other:?})"),
    }
}
