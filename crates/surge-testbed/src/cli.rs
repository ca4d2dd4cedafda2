//! `surge testbed ...`: the command-line face of this crate.

use crate::{down, up, DownReport, Error, Rate, Role, Spec, Testbed, DEFAULT_MTU, DEFAULT_NAME};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Subcommand, Debug)]
pub enum TestbedCommand {
    /// Make K hosts on this machine and start daemons on some of them (needs root).
    ///
    /// Each host is a network namespace with one link to a shared bridge, shaped with tc
    /// to --rate in both directions when given. Hosts 0..D run `surge start` as the ranks
    /// of one launch; the others are for clients (`surge testbed exec`).
    Up(UpArgs),
    /// Remove everything a testbed made, also after a failed run.
    ///
    /// Stops its daemons with `surge stop`, kills whatever still runs in its namespaces,
    /// deletes the namespaces (and with them every link and qdisc) and the state dir.
    /// A no-op when nothing is left.
    Down(DownArgs),
    /// Show a testbed's hosts, link rates and daemons.
    ///
    /// Exit status 2 when a namespace is missing or a daemon is dead.
    Status(StatusArgs),
    /// Run a command on one host of a testbed, with SURGE_CLUSTER set.
    ///
    /// SURGE_CLUSTER points at the testbed's cluster file, so `surge` commands and programs
    /// under `surge run` reach its daemons; Open MPI's launch agent is the testbed's, so
    /// `mpirun --host IP1,IP2 ...` runs on those hosts. The command's exit status is passed through.
    Exec(ExecArgs),
}

#[derive(Args, Debug)]
#[command(after_help = "Example:\n  surge testbed up --hosts 3 --rate 10gbit\n  \
    surge testbed exec --host 2 -- surge cp big.h5 /surge/\n  surge testbed down")]
pub struct UpArgs {
    /// Number of hosts (network namespaces), at least 2.
    #[arg(long, value_name = "K")]
    pub hosts: u32,
    /// Hosts 0..D run daemons, the others are client hosts (default: all but the last; 0 for
    /// hosts only, e.g. for `surge run --hosts` across them).
    #[arg(long, value_name = "D")]
    pub daemon_hosts: Option<u32>,
    /// Daemons on each daemon host.
    #[arg(long, value_name = "M", default_value_t = 1)]
    pub daemons_per_host: u32,
    /// Rate of each host's link, in both directions, in tc syntax: 10gbit, 800mbit (bits/s),
    /// 500mbps (bytes/s). Default: unshaped.
    #[arg(long, value_name = "RATE", value_parser = parse_rate)]
    pub rate: Option<Rate>,
    /// MTU of every link.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MTU)]
    pub mtu: u32,
    #[command(flatten)]
    pub name: NameArg,
    /// Directory for the cluster file, buffers, PFS, logs and state (default: /tmp/surge-testbed-<name>);
    /// must be new or empty, as `down` deletes it.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Extra arguments for every `surge start` (after `--`).
    #[arg(last = true, value_name = "START_ARGS")]
    pub start_args: Vec<String>,
}

#[derive(Args, Debug)]
pub struct DownArgs {
    #[command(flatten)]
    pub name: NameArg,
    /// The state dir given to `up`, if it was not the default (`up` records it, so this is rarely needed).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    pub name: NameArg,
}

#[derive(Args, Debug)]
pub struct ExecArgs {
    /// Index of the host to run on (see `surge testbed status`).
    #[arg(long, value_name = "I")]
    pub host: u32,
    #[command(flatten)]
    pub name: NameArg,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct NameArg {
    /// Testbed name, 1 to 8 of a-z0-9; its namespaces are called surge-<name>-*.
    #[arg(long = "name", value_name = "NAME", default_value = DEFAULT_NAME)]
    pub name: String,
}

fn parse_rate(text: &str) -> Result<Rate, String> {
    text.parse().map_err(|e: Error| e.to_string())
}

/// Runs one `surge testbed` command; `surge_bin` is the `surge` binary that `up` starts daemons with.
pub fn run(cmd: TestbedCommand, surge_bin: PathBuf) -> Result<ExitCode, String> {
    match cmd {
        TestbedCommand::Up(a) => run_up(a, surge_bin),
        TestbedCommand::Down(a) => run_down(a),
        TestbedCommand::Status(a) => run_status(a),
        TestbedCommand::Exec(a) => run_exec(a),
    }
}

fn run_up(a: UpArgs, surge_bin: PathBuf) -> Result<ExitCode, String> {
    let mut spec = Spec::new(&a.name.name, a.hosts, surge_bin);
    if let Some(d) = a.daemon_hosts {
        spec.daemon_hosts = d;
    }
    spec.daemons_per_host = a.daemons_per_host;
    spec.rate = a.rate;
    spec.mtu = a.mtu;
    spec.start_args = a.start_args;
    if let Some(dir) = a.state_dir {
        spec.state_dir = dir;
    }
    let tb = up(&spec).map_err(|e| e.to_string())?;
    let link = tb.rate.map(|r| format!("{r} each way")).unwrap_or_else(|| "unshaped".into());
    println!(
        "testbed {} is up: {} hosts, {} daemons, links {link}, mtu {}",
        tb.name,
        tb.hosts.len(),
        tb.daemons.len(),
        tb.mtu
    );
    println!("  {:<5} {:<16} {:<15} role", "host", "namespace", "ip");
    for h in &tb.hosts {
        let daemons = tb.daemons.iter().filter(|d| d.host == h.index).count();
        let role = match h.role {
            Role::Daemon => format!("daemon ×{daemons}"),
            Role::Client => "client".into(),
        };
        println!("  {:<5} {:<16} {:<15} {role}", h.index, h.netns, h.ip.to_string());
    }
    let flag = crate::error::name_flag(&tb.name);
    if tb.daemons.is_empty() {
        println!("no daemons: start them across hosts with e.g. `surge testbed exec{flag} --host 0 -- surge run --hosts IP,IP -- COMMAND`");
    } else {
        println!("cluster file: {}", tb.cluster_file.display());
    }
    println!("mpirun reaches the hosts by their addresses (--host IP,IP) through {}", tb.launch_agent().display());
    let client = tb.client_hosts().next().map_or(0, |h| h.index);
    println!("run a client: surge testbed exec{flag} --host {client} -- COMMAND   (e.g. -- surge status)");
    println!("remove it:    surge testbed down{flag}");
    Ok(ExitCode::SUCCESS)
}

fn run_down(a: DownArgs) -> Result<ExitCode, String> {
    let name = &a.name.name;
    let report = down(name, a.state_dir.as_deref()).map_err(|e| e.to_string())?;
    print!("{}", describe_down(name, &report));
    Ok(if report.notes.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn describe_down(name: &str, r: &DownReport) -> String {
    use std::fmt::Write;
    if r.is_empty() && r.notes.is_empty() {
        return format!("testbed {name}: nothing to remove\n");
    }
    let mut out = format!("testbed {name} removed\n");
    if r.stopped_cleanly {
        out.push_str("  daemons stopped with `surge stop`\n");
    }
    if !r.killed.is_empty() {
        let _ = writeln!(out, "  killed {} process(es) left in its namespaces", r.killed.len());
    }
    if !r.namespaces.is_empty() {
        let _ = writeln!(out, "  deleted namespaces {}", r.namespaces.join(" "));
    }
    if let Some(dir) = &r.state_dir {
        let _ = writeln!(out, "  removed {}", dir.display());
    }
    for note in &r.notes {
        let _ = writeln!(out, "  note: {note}");
    }
    out
}

fn run_status(a: StatusArgs) -> Result<ExitCode, String> {
    let tb = Testbed::load(&a.name.name, None).map_err(|e| e.to_string())?;
    let link = tb.rate.map(|r| format!("{r} each way")).unwrap_or_else(|| "unshaped".into());
    println!("testbed {}: {} hosts, links {link}, mtu {}", tb.name, tb.hosts.len(), tb.mtu);
    println!("cluster file: {}", tb.cluster_file.display());
    println!("  {:<5} {:<16} {:<15} {:<7} {:<10} daemons", "host", "namespace", "ip", "role", "link");
    let mut healthy = true;
    for s in tb.status() {
        let link = if s.netns_present { s.shaped_rate.unwrap_or_else(|| "unshaped".into()) } else { "MISSING".into() };
        let daemons = if s.daemons == 0 { "-".to_string() } else { format!("{}/{} alive", s.daemons_alive, s.daemons) };
        healthy &= s.netns_present && s.daemons_alive == s.daemons;
        let h = &s.host;
        println!(
            "  {:<5} {:<16} {:<15} {:<7} {:<10} {daemons}",
            h.index,
            h.netns,
            h.ip.to_string(),
            h.role.to_string(),
            link
        );
    }
    Ok(if healthy { ExitCode::SUCCESS } else { ExitCode::from(2) })
}

fn run_exec(a: ExecArgs) -> Result<ExitCode, String> {
    use std::os::unix::process::ExitStatusExt;
    let tb = Testbed::load(&a.name.name, None).map_err(|e| e.to_string())?;
    if a.host as usize >= tb.hosts.len() {
        return Err(format!("testbed {} has hosts 0 to {}, not {}", tb.name, tb.hosts.len() - 1, a.host));
    }
    let (program, args) = a.command.split_first().ok_or("give the command to run after `--`")?;
    let status =
        tb.command(a.host, program).args(args).status().map_err(|e| format!("cannot run `ip netns exec`: {e}"))?;
    // Like a shell: the command's status, or 128+N when signal N ended it.
    let code = status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(1);
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: TestbedCommand,
    }

    #[test]
    fn grammar_is_consistent_and_every_flag_is_documented() {
        Cli::command().debug_assert();
        let mut root = Cli::command();
        for sub in root.get_subcommands_mut() {
            assert!(sub.get_about().is_some(), "{} has no help", sub.get_name());
            for arg in sub.get_arguments().filter(|a| a.get_id() != "help") {
                assert!(arg.get_help().is_some(), "{} {} has no help", sub.get_name(), arg.get_id());
            }
        }
    }

    #[test]
    fn up_takes_defaults_a_rate_and_start_args() {
        let cli =
            Cli::try_parse_from(["t", "up", "--hosts", "3", "--rate", "200mbit", "--", "--conn-rate", "100M"]).unwrap();
        let TestbedCommand::Up(a) = cli.cmd else { panic!("not up") };
        assert_eq!((a.hosts, a.daemon_hosts, a.daemons_per_host, a.mtu), (3, None, 1, 9000));
        assert_eq!(a.rate.unwrap().bits_per_second(), 200_000_000);
        assert_eq!(a.name.name, "tb");
        assert_eq!(a.start_args, ["--conn-rate", "100M"]);
        let e = Cli::try_parse_from(["t", "up", "--hosts", "3", "--rate", "fast"]).err().unwrap().to_string();
        assert!(e.contains("tc unit"), "{e}");
    }

    #[test]
    fn exec_needs_a_host_and_a_command() {
        let cli = Cli::try_parse_from(["t", "exec", "--host", "2", "--name", "ci", "--", "surge", "ls", "-l"]).unwrap();
        let TestbedCommand::Exec(a) = cli.cmd else { panic!("not exec") };
        assert_eq!((a.host, a.name.name.as_str()), (2, "ci"));
        assert_eq!(a.command, ["surge", "ls", "-l"]);
        assert!(Cli::try_parse_from(["t", "exec", "--host", "2"]).is_err());
    }

    #[test]
    fn down_report_reads_as_what_happened() {
        assert_eq!(describe_down("tb", &DownReport::default()), "testbed tb: nothing to remove\n");
        let r = DownReport {
            stopped_cleanly: true,
            killed: vec![7],
            namespaces: vec!["surge-tb-h0".into(), "surge-tb-hub".into()],
            state_dir: Some("/tmp/surge-testbed-tb".into()),
            notes: vec![],
        };
        let text = describe_down("tb", &r);
        assert!(
            text.contains("surge stop")
                && text.contains("killed 1")
                && text.contains("surge-tb-hub")
                && text.contains("/tmp/surge-testbed-tb"),
            "{text}"
        );
    }
}
