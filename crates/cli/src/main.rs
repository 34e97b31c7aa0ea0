//! `redoguard`: the one command. Each subcommand lives in its own module under `cmd/` and
//! calls into a library crate; nothing here knows how redo is written or shipped.

mod cmd;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "redoguard",
    version,
    about = "Data Guard-style disaster recovery: redo transport, standbys, and the tools to plan them"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// The admin API token every POST needs (role changes, log switches, edits): the members'
    /// `auth.admin_token`; or REDOGUARD_TOKEN. Without it, a member on this host is asked where
    /// its own token is (DATA_DIR/admin-token), which is read if this user owns it.
    #[arg(long, global = true)]
    token: Option<String>,
    /// The CA to check members' admin APIs with, when they speak HTTPS (`tls.admin`); or
    /// REDOGUARD_CA.
    #[arg(long, global = true)]
    ca: Option<std::path::PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs the built-in demonstration on a throwaway data directory.
    Demo(cmd::demo::Args),
    /// Runs the database server (Redis protocol for clients, HTTP for admin and metrics).
    Server(cmd::server::Args),
    /// Shows what a running server is doing (logs, checkpoint, archive, wait events).
    Status(cmd::status::Args),
    /// Switches logs now on a running primary: the current log is closed and archived.
    Logswitch(cmd::logswitch::Args),
    /// The fast-start failover observer: fails over by itself when the primary is lost, and
    /// answers Redis Sentinel clients.
    Observer(cmd::observer::Args),
    /// Shows the configuration (every member) or one member of it.
    #[command(subcommand)]
    Show(cmd::roles::ShowCommand),
    /// Is a standby ready to become the primary? Says what is missing.
    Validate(cmd::roles::ValidateArgs),
    /// Planned role change: the primary role moves to a standby, losing nothing.
    Switchover(cmd::roles::SwitchoverArgs),
    /// The primary is lost: a standby becomes the primary of a new incarnation.
    Failover(cmd::roles::FailoverArgs),
    /// Makes a failed-over primary a standby of the new one (its divergent redo set aside).
    Reinstate(cmd::roles::ReinstateArgs),
    /// Changes a destination (defer, enable, transport, compression …) or the protection mode
    /// at run time, on every member; kept across restarts.
    #[command(subcommand)]
    Edit(cmd::edit::EditCommand),
    /// Prints the argon2id hash of a password read from standard input, for
    /// `[[auth.users]] password_hash`.
    Passwd,
    /// Makes a test CA and a certificate for every member and observer of a configuration
    /// (for TLS; docs/security.md).
    Certs(cmd::certs::Args),
    /// Benchmarks that reproduce the reference experiments (JSON out).
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
    /// Sizing advice: bandwidth, BDP, socket buffers, SYNC viability, compression, ASYNC exposure.
    Advise(tools::advise::AdviseArgs),
    /// Standby log disk test: sequential synced writes, IOPS and latency percentiles.
    Iotest(tools::iotest::IoTestArgs),
    /// WAN link emulator: two namespaces joined by a forwarder with delay, rate cap and loss.
    #[command(subcommand)]
    Linkemu(cmd::linkemu::LinkemuCommand),
    /// Network test that behaves like redo transport (server and client).
    #[command(subcommand)]
    Nettest(cmd::nettest::NettestCommand),
}

fn main() -> std::process::ExitCode {
    // Output piped into `head` ends quietly, as for any Unix tool, instead of a panic.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    // Servers and daemons log what they serve; one-shot commands only warnings.
    let default_filter = match &cli.command {
        Command::Nettest(cmd::nettest::NettestCommand::Server(_)) => "info",
        Command::Linkemu(cmd::linkemu::LinkemuCommand::Up(_)) => "info",
        Command::Server(_) => "info",
        Command::Observer(_) => "info",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("REDOGUARD_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let token = cli.token.or_else(|| std::env::var("REDOGUARD_TOKEN").ok());
    let ca = cli.ca.or_else(|| std::env::var_os("REDOGUARD_CA").map(std::path::PathBuf::from));
    if let Err(error) = cmd::passwd::set_admin_client(token, ca) {
        eprintln!("redoguard: error: {error:#}");
        return std::process::ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Passwd => cmd::passwd::run(),
        Command::Demo(args) => cmd::demo::run(args),
        Command::Server(args) => cmd::server::run(args),
        Command::Status(args) => cmd::status::run(args),
        Command::Logswitch(args) => cmd::logswitch::run(args),
        Command::Observer(args) => cmd::observer::run(args),
        Command::Show(command) => cmd::roles::show(command),
        Command::Validate(args) => cmd::roles::validate(args),
        Command::Switchover(args) => cmd::roles::switchover(args),
        Command::Failover(args) => cmd::roles::failover(args),
        Command::Reinstate(args) => cmd::roles::reinstate(args),
        Command::Edit(command) => cmd::edit::run(command),
        Command::Certs(args) => cmd::certs::run(args),
        Command::Bench(command) => cmd::bench::run(command),
        Command::Nettest(command) => cmd::nettest::run(command),
        Command::Iotest(args) => cmd::iotest::run(args),
        Command::Advise(args) => cmd::advise::run(args),
        Command::Linkemu(command) => cmd::linkemu::run(command),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("redoguard: error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
