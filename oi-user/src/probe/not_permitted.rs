//! The kernel's refusal for want of privileges, told apart from every other failure by the
//! errno among an error's causes (aya keeps the syscall's `io::Error` as a source), never by
//! the text of a message.

use std::error::Error as StdError;

/// The kernel refused a step (loading, attaching) for want of privileges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the kernel refused ({errno}): not permitted")]
pub struct NotPermitted {
    pub errno: i32,
}

impl NotPermitted {
    /// Loading: EPERM. The verifier rejects a program it cannot prove safe with EACCES,
    /// which is a fault of the program, not of the privileges.
    pub const LOADING: &[i32] = &[libc::EPERM];
    /// Attaching a uprobe: EPERM or EACCES.
    pub const ATTACHING: &[i32] = &[libc::EPERM, libc::EACCES];

    /// The refusal in `e` or one of its causes, if one of them is an `io::Error` whose errno
    /// is one of `errnos`.
    pub fn among_causes(e: &(dyn StdError + 'static), errnos: &[i32]) -> Option<Self> {
        let mut cause: Option<&(dyn StdError + 'static)> = Some(e);
        while let Some(err) = cause {
            if let Some(errno) = err
                .downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::raw_os_error)
                && errnos.contains(&errno)
            {
                return Some(Self { errno });
            }
            cause = err.source();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    /// Found through a chain of causes, by errno, and only for the errnos asked for.
    #[test]
    fn finds_the_errno_among_the_causes() {
        let eperm = Outer(std::io::Error::from_raw_os_error(libc::EPERM));
        assert_eq!(
            NotPermitted::among_causes(&eperm, NotPermitted::LOADING),
            Some(NotPermitted { errno: libc::EPERM })
        );
        let eacces = Outer(std::io::Error::from_raw_os_error(libc::EACCES));
        assert_eq!(
            NotPermitted::among_causes(&eacces, NotPermitted::LOADING),
            None
        );
        assert!(NotPermitted::among_causes(&eacces, NotPermitted::ATTACHING).is_some());
        let other = Outer(std::io::Error::from_raw_os_error(libc::EINVAL));
        assert_eq!(
            NotPermitted::among_causes(&other, NotPermitted::ATTACHING),
            None
        );
    }
}
