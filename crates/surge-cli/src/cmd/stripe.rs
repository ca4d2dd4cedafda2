//! `surge setstripe` and `surge getstripe`, after `lfs setstripe/getstripe`.

use super::{ns_path, CmdResult, Ctx, PathsArgs};
use crate::units::human;
use crate::units::parse_size;
use clap::Args;
use std::process::ExitCode;
use surge_client::{FileKind, Layout};
use surge_proto::layout::{FIRST_AUTO, STRIPE_ALL};

#[derive(Args)]
pub struct SetstripeArgs {
    /// Stripe count (-1 = every daemon, 0 = inherit).
    #[arg(short = 'c', long = "stripe-count", allow_negative_numbers = true, default_value_t = 0)]
    pub count: i64,
    /// Stripe size, a multiple of 64K (0 = inherit).
    #[arg(short = 'S', long = "stripe-size", value_parser = parse_size, default_value = "0")]
    pub size: u64,
    /// First daemon (-1 = spread automatically).
    #[arg(short = 'i', long = "stripe-index", allow_negative_numbers = true, default_value_t = -1)]
    pub first: i64,
    pub path: String,
}

fn requested_layout(a: &SetstripeArgs) -> Result<Layout, String> {
    let stripe_count = match a.count {
        -1 => STRIPE_ALL,
        c if c >= 0 && c < u32::MAX as i64 => c as u32,
        c => return Err(format!("stripe count {c}: use -1 (every daemon), 0 (inherit) or a positive count")),
    };
    let first = match a.first {
        -1 => FIRST_AUTO,
        i if i >= 0 && i < u32::MAX as i64 => i as u32,
        i => return Err(format!("stripe index {i}: use -1 (automatic) or a daemon index")),
    };
    Ok(Layout { stripe_count, stripe_size: a.size, first })
}

pub fn setstripe(ctx: &Ctx, a: SetstripeArgs) -> CmdResult {
    let client = ctx.client()?;
    let path = ns_path(&a.path)?;
    let layout = requested_layout(&a)?;
    layout.validate(client.cluster().daemons.len() as u32)?;
    match client.stat(&path) {
        Ok(attr) if attr.kind == FileKind::Dir => {
            client.set_layout(&path, layout).map_err(|e| format!("{}: {e}", a.path))?;
        }
        Ok(_) => {
            return Err(format!(
                "{}: a file's layout is fixed when it is created; create a new file with \
                 `surge setstripe` and copy the data into it",
                a.path
            ))
        }
        Err(e) if e.errno() == libc::ENOENT => {
            client.create(&path, 0o644, layout).map_err(|e| format!("{}: {e}", a.path))?;
        }
        Err(e) => return Err(format!("{}: {e}", a.path)),
    }
    Ok(ExitCode::SUCCESS)
}

fn describe(field: u32, special: u32, special_name: &str) -> String {
    match field {
        0 => "inherit".into(),
        f if f == special => special_name.into(),
        f => f.to_string(),
    }
}

pub fn getstripe(ctx: &Ctx, a: PathsArgs) -> CmdResult {
    let client = ctx.client()?;
    let daemons = client.cluster().daemons.clone();
    for arg in &a.paths {
        let path = ns_path(arg)?;
        let attr = client.stat(&path).map_err(|e| format!("{arg}: {e}"))?;
        let l = attr.layout;
        println!("{arg}");
        if attr.kind == FileKind::Dir {
            println!(
                "  default layout: stripe_count {}  stripe_size {}  first {}",
                describe(l.stripe_count, STRIPE_ALL, "-1 (all daemons)"),
                if l.stripe_size == 0 {
                    "inherit".into()
                } else {
                    format!("{} ({})", l.stripe_size, human(l.stripe_size))
                },
                if l.stripe_count == 0 && l.stripe_size == 0 {
                    "inherit".into()
                } else {
                    describe(l.first, FIRST_AUTO, "-1 (auto)")
                },
            );
            continue;
        }
        if attr.tier == surge_client::Tier::Pfs {
            println!("  on the PFS only (no buffer layout)");
            continue;
        }
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
    Ok(ExitCode::SUCCESS)
}
