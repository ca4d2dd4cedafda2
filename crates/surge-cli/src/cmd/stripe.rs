//! `surge setstripe` and `surge getstripe`, after `lfs setstripe/getstripe`:
//! the same flags, several paths at once; a path that fails is named on
//! stderr and the others are still done (exit status 1 then).

use super::{ns_path, CmdResult, Ctx};
use crate::units::human;
use crate::units::parse_size;
use clap::Args;
use std::process::ExitCode;
use surge_client::{Client, FileKind, Layout, Tier};
use surge_proto::layout::{LayoutPlacement, FIRST_AUTO, FIRST_LOCAL, STRIPE_ALL};

#[derive(Args)]
#[command(after_help = "Examples:\n  surge setstripe -c -1 -S 1M /ckpt /out\n  surge setstripe -d /ckpt\n  \
    surge setstripe -c 1 /ckpt/small.log   (creates an empty file with that layout)\n  \
    surge setstripe -c 1 --placement local /out   (file-per-process output stays on each writer's node)")]
pub struct SetstripeArgs {
    /// Stripe count (-1 = every daemon, 0 = inherit).
    #[arg(short = 'c', long = "stripe-count", allow_negative_numbers = true, value_name = "COUNT")]
    pub count: Option<i64>,
    /// Stripe size, a multiple of 64K (0 = inherit).
    #[arg(short = 'S', long = "stripe-size", value_parser = parse_size, value_name = "SIZE")]
    pub size: Option<u64>,
    /// First daemon (-1 = spread automatically).
    #[arg(short = 'i', long = "stripe-index", allow_negative_numbers = true, value_name = "INDEX")]
    pub first: Option<i64>,
    /// How new files choose their first daemon: auto (spread over every daemon) or local (a
    /// daemon of the creating process's node, the node's daemons taken in turn; auto when that
    /// node runs none). A file of more than one stripe stripes on from that daemon.
    #[arg(long, value_name = "PLACEMENT", value_parser = str::parse::<LayoutPlacement>, conflicts_with = "first")]
    pub placement: Option<LayoutPlacement>,
    /// Delete a directory's default layout: its new files take their parent's (the root's goes
    /// back to Surge's default).
    #[arg(short = 'd', long = "delete", conflicts_with_all = ["count", "size", "first", "placement"])]
    pub delete: bool,
    /// Directories, or files to create empty with the layout (a file's layout is fixed when it is created).
    #[arg(required = true)]
    pub paths: Vec<String>,
}

#[derive(Args)]
pub struct GetstripeArgs {
    /// Print only each path's stripe count (-1 = every daemon, 0 = inherit).
    #[arg(short = 'c', long = "stripe-count")]
    pub count: bool,
    /// Print only each path's stripe size in bytes (0 = inherit).
    #[arg(short = 'S', long = "stripe-size")]
    pub size: bool,
    /// Print only each path's first daemon (-1 = spread automatically, local = on the
    /// creator's node).
    #[arg(short = 'i', long = "stripe-index")]
    pub first: bool,
    #[arg(required = true)]
    pub paths: Vec<String>,
}

const LAYOUT_FLAGS: &str = "-c/--stripe-count COUNT, -S/--stripe-size SIZE, -i/--stripe-index INDEX, \
    --placement auto|local, or -d/--delete to delete a directory's default layout";

fn requested_layout(a: &SetstripeArgs) -> Result<Layout, String> {
    if a.delete {
        // All inherited, the first daemon's choice too.
        return Ok(Layout::INHERIT);
    }
    if a.count.is_none() && a.size.is_none() && a.first.is_none() && a.placement.is_none() {
        return Err(format!("no layout given: say what to set with {LAYOUT_FLAGS}"));
    }
    let stripe_count = match a.count.unwrap_or(0) {
        -1 => STRIPE_ALL,
        c if c >= 0 && c < u32::MAX as i64 => c as u32,
        c => return Err(format!("stripe count {c}: use -1 (every daemon), 0 (inherit) or a positive count")),
    };
    let first = match (a.placement, a.first.unwrap_or(-1)) {
        (Some(placement), _) => placement.first(),
        (None, -1) => FIRST_AUTO,
        (None, i) if i >= 0 && i < FIRST_LOCAL as i64 => i as u32,
        (None, i) => return Err(format!("stripe index {i}: use -1 (automatic) or a daemon index")),
    };
    Ok(Layout { stripe_count, stripe_size: a.size.unwrap_or(0), first })
}

pub fn setstripe(ctx: &Ctx, a: SetstripeArgs) -> CmdResult {
    let layout = requested_layout(&a)?;
    let client = ctx.client()?;
    layout.validate(client.cluster().daemons.len() as u32)?;
    Ok(each_path(&a.paths, |arg| set_one(&client, arg, layout, a.delete)))
}

fn set_one(client: &Client, arg: &str, layout: Layout, delete: bool) -> Result<(), String> {
    let path = ns_path(arg)?;
    match client.stat(&path) {
        Ok(attr) if attr.kind == FileKind::Dir => {
            client.set_layout(&path, layout).map(drop).map_err(|e| format!("{arg}: {e}"))
        }
        Ok(_) if delete => Err(format!("{arg}: a file has no default layout to delete (-d is for directories)")),
        Ok(_) => Err(format!(
            "{arg}: a file's layout is fixed when it is created; create a new file with `surge setstripe` and \
             copy the data into it"
        )),
        Err(e) if e.errno() == libc::ENOENT && delete => Err(format!("{arg}: {e}")),
        Err(e) if e.errno() == libc::ENOENT => {
            client.create(&path, 0o644, layout).map(drop).map_err(|e| format!("{arg}: {e}"))
        }
        Err(e) => Err(format!("{arg}: {e}")),
    }
}

/// Runs `one` on every path, naming failures on stderr; exit status 1 if any failed.
fn each_path(paths: &[String], mut one: impl FnMut(&str) -> Result<(), String>) -> ExitCode {
    let mut failed = 0usize;
    for arg in paths {
        if let Err(e) = one(arg) {
            note!("surge: {e}");
            failed += 1;
        }
    }
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn describe(field: u32, special: u32, special_name: &str) -> String {
    match field {
        0 => "inherit".into(),
        f if f == special => special_name.into(),
        f => f.to_string(),
    }
}

/// A directory's first daemon as `getstripe` prints it.
fn describe_first(first: u32) -> String {
    match first {
        FIRST_LOCAL => "local (the creator's node)".into(),
        f => describe(f, FIRST_AUTO, "-1 (auto)"),
    }
}

/// A layout field as `lfs getstripe -c/-S/-i` prints it.
fn field_values(a: &GetstripeArgs, l: &Layout) -> Vec<String> {
    let signed = |v: u32, special: u32| match v {
        FIRST_LOCAL if special == FIRST_AUTO => "local".to_string(),
        v if v == special => "-1".to_string(),
        v => v.to_string(),
    };
    let mut values = Vec::new();
    if a.count {
        values.push(signed(l.stripe_count, STRIPE_ALL));
    }
    if a.size {
        values.push(l.stripe_size.to_string());
    }
    if a.first {
        values.push(signed(l.first, FIRST_AUTO));
    }
    values
}

pub fn getstripe(ctx: &Ctx, a: GetstripeArgs) -> CmdResult {
    let client = ctx.client()?;
    let fields_only = a.count || a.size || a.first;
    let many = a.paths.len() > 1;
    Ok(each_path(&a.paths, |arg| {
        let attr = client.stat(&ns_path(arg)?).map_err(|e| format!("{arg}: {e}"))?;
        let on_pfs_only = attr.kind == FileKind::File && attr.tier == Tier::Pfs;
        if fields_only {
            if on_pfs_only {
                return Err(format!("{arg}: on the PFS only, it has no buffer layout"));
            }
            let values = field_values(&a, &attr.layout).join(" ");
            if many {
                println!("{arg}: {values}");
            } else {
                println!("{values}");
            }
        } else if on_pfs_only {
            println!("{arg}\n  on the PFS only (no buffer layout)");
        } else {
            print_layout(&client, arg, &attr);
        }
        Ok(())
    }))
}

/// The full `getstripe` report of one path: its layout, and for a file the daemon of every stripe.
fn print_layout(client: &Client, arg: &str, attr: &surge_client::Attr) {
    let l = attr.layout;
    println!("{arg}");
    if attr.kind == FileKind::Dir {
        println!(
            "  default layout: stripe_count {}  stripe_size {}  first {}",
            describe(l.stripe_count, STRIPE_ALL, "-1 (all daemons)"),
            if l.stripe_size == 0 { "inherit".into() } else { format!("{} ({})", l.stripe_size, human(l.stripe_size)) },
            if l.stripe_count == 0 && l.stripe_size == 0 { "inherit".into() } else { describe_first(l.first) },
        );
        return;
    }
    let daemons = &client.cluster().daemons;
    println!(
        "  stripe_count {}  stripe_size {} ({})  first {}",
        l.stripe_count,
        l.stripe_size,
        human(l.stripe_size),
        l.first
    );
    println!("  stripe  daemon  address");
    for k in 0..l.stripe_count {
        let d = l.daemon_of(k, daemons.len() as u32);
        let addr = daemons.get(d as usize).map(|e| e.addr.as_str()).unwrap_or("?");
        println!("  {k:>6}  {d:>6}  {addr}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Set {
        #[command(flatten)]
        a: SetstripeArgs,
    }

    fn set(args: &[&str]) -> Result<Layout, String> {
        let parsed =
            Set::try_parse_from(std::iter::once("setstripe").chain(args.iter().copied())).map_err(|e| e.to_string())?;
        requested_layout(&parsed.a)
    }

    #[test]
    fn setstripe_takes_lfs_flags_and_refuses_to_guess_a_layout() {
        let l = set(&["--stripe-count", "-1", "--stripe-size", "1M", "-i", "1", "/a", "/b"]).unwrap();
        assert_eq!((l.stripe_count, l.stripe_size, l.first), (STRIPE_ALL, 1 << 20, 1));
        let l = set(&["-S", "128K", "/a"]).unwrap();
        assert_eq!((l.stripe_count, l.stripe_size, l.first), (0, 128 << 10, FIRST_AUTO));
        assert_eq!(set(&["-d", "/a"]).unwrap(), Layout::INHERIT, "-d inherits every field, the placement too");
        let none = set(&["/a"]).unwrap_err();
        assert!(none.contains("-c/--stripe-count") && none.contains("-d/--delete"), "{none}");
        assert!(set(&["-d", "-c", "2", "/a"]).is_err(), "-d with a layout flag is refused");
    }

    #[test]
    fn setstripe_placement_local_marks_the_first_daemon_and_refuses_an_index_beside_it() {
        let l = set(&["-c", "1", "--placement", "local", "/out"]).unwrap();
        assert_eq!((l.stripe_count, l.stripe_size, l.first), (1, 0, FIRST_LOCAL));
        assert!(l.is_local() && l.validate(2).is_ok());
        assert_eq!(set(&["--placement", "auto", "/out"]).unwrap().first, FIRST_AUTO);
        assert!(set(&["--placement", "local", "-i", "1", "/out"]).is_err());
        let bad = set(&["--placement", "near", "/out"]).unwrap_err();
        assert!(bad.contains("auto") && bad.contains("local"), "{bad}");
        assert!(set(&["-i", &FIRST_LOCAL.to_string(), "/out"]).is_err(), "the marker is no daemon index");
    }

    #[test]
    fn getstripe_prints_local_placement_by_name() {
        let a = GetstripeArgs { count: false, size: false, first: true, paths: vec![] };
        let dir = Layout { stripe_count: 1, stripe_size: 0, first: FIRST_LOCAL };
        assert_eq!(field_values(&a, &dir), ["local"]);
        assert_eq!(field_values(&a, &Layout { first: FIRST_AUTO, ..dir }), ["-1"]);
        assert!(describe_first(FIRST_LOCAL).starts_with("local"));
    }
}
