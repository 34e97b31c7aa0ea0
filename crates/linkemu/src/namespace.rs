//! Network namespaces: create and delete them with `ip netns`, and move a thread into one.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;

use crate::Error;

/// Where `ip netns add` bind-mounts a namespace.
const NETNS_DIR: &str = "/run/netns";

/// Runs `ip ARGS…` and turns a failure into an error that quotes the command and its stderr.
pub(crate) fn ip(args: &[&str]) -> Result<(), Error> {
    let output = Command::new("ip").args(args).output().map_err(|source| Error::Command {
        command: format!("ip {}", args.join(" ")),
        reason: format!("cannot run `ip` (is iproute2 installed?): {source}"),
    })?;
    if output.status.success() {
        return Ok(());
    }
    Err(Error::Command {
        command: format!("ip {}", args.join(" ")),
        reason: String::from_utf8_lossy(&output.stderr).trim().to_string(),
    })
}

/// Whether a namespace of that name exists.
pub(crate) fn exists(name: &str) -> bool {
    std::path::Path::new(NETNS_DIR).join(name).exists()
}

/// A namespace this process created; dropping it deletes it.
#[derive(Debug)]
pub(crate) struct Namespace {
    name: String,
}

impl Namespace {
    /// Creates the namespace and brings its loopback up. Refuses a name already in use: it
    /// belongs to someone else.
    pub(crate) fn create(name: &str) -> Result<Namespace, Error> {
        if exists(name) {
            return Err(Error::Command {
                command: format!("ip netns add {name}"),
                reason: "a namespace of that name already exists (not ours: left alone)".into(),
            });
        }
        ip(&["netns", "add", name])?;
        let namespace = Namespace { name: name.to_string() };
        ip(&["-n", name, "link", "set", "lo", "up"])?;
        Ok(namespace)
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        delete(&self.name);
    }
}

/// Deletes a namespace, logging (not failing) if that does not work: this runs in `Drop`.
pub(crate) fn delete(name: &str) {
    if let Err(error) = ip(&["netns", "del", name]) {
        tracing::warn!(namespace = name, %error, "could not delete network namespace");
    }
}

/// While alive, the current thread is inside another network namespace; dropping it moves
/// the thread back. Sockets created meanwhile stay in the namespace they were created in.
pub struct NamespaceGuard {
    original: File,
}

/// Moves the current thread into the named namespace (`setns(2)`), until the guard drops.
pub fn enter(name: &str) -> Result<NamespaceGuard, Error> {
    let original = File::open("/proc/thread-self/ns/net")
        .map_err(|source| Error::Io { what: "open /proc/thread-self/ns/net".into(), source })?;
    let target = File::open(std::path::Path::new(NETNS_DIR).join(name))
        .map_err(|source| Error::Io { what: format!("open namespace {name}"), source })?;
    setns(&target)
        .map_err(|source| Error::Io { what: format!("enter namespace {name}"), source })?;
    Ok(NamespaceGuard { original })
}

fn setns(file: &File) -> std::io::Result<()> {
    // SAFETY: setns takes a valid open descriptor and a namespace type; it changes only the
    // calling thread's network namespace.
    let result = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if result == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

impl Drop for NamespaceGuard {
    fn drop(&mut self) {
        // A thread that cannot go back must not go on running in the wrong namespace.
        setns(&self.original).expect("return to the original network namespace");
    }
}

/// A command that runs `program` inside the named namespace, through `ip netns exec`.
pub(crate) fn command(name: &str, program: &OsStr) -> Command {
    let mut command = Command::new("ip");
    command.args(["netns", "exec", name]).arg(program);
    command
}
