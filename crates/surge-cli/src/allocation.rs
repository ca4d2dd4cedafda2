//! The allocation `surge run` spreads a job-scoped cluster over: the nodes
//! of the job and the job's id. Nodes come from (first found) `--hosts` /
//! `--hostfile`, Slurm's `SLURM_JOB_NODELIST`, an Open MPI / PRRTE hostfile
//! named by the environment, else this host alone. The id is Slurm's job id
//! when Slurm runs the job, so a profile can be matched with `sacct`.
//!
//! Every parser here takes text a user or a resource manager wrote, so a
//! malformed input is an error that names the input and the fault, never a panic.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The most hosts one list may expand to: `n[0-999999999]` is a typo, not a job.
const MAX_HOSTS: usize = 1 << 16;

/// Environment variables naming an Open MPI (ORTE) or PRRTE default hostfile.
const MPI_HOSTFILE_VARS: [&str; 2] = ["OMPI_MCA_orte_default_hostfile", "PRTE_MCA_prte_default_hostfile"];

/// The nodes of a job, in the order the resource manager gave them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    pub nodes: Vec<String>,
    /// Where the list came from, for messages ("SLURM_JOB_NODELIST", "--hostfile /x").
    pub source: String,
}

impl Allocation {
    /// The job's nodes from the flags, else the environment, else this host.
    pub fn detect(hosts: Option<&str>, hostfile: Option<&Path>) -> Result<Allocation, String> {
        Allocation::from_sources(hosts, hostfile, |name| std::env::var(name).ok(), &|path| {
            std::fs::read_to_string(path)
        })
    }

    fn from_sources(
        hosts: Option<&str>,
        hostfile: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
        read: &dyn Fn(&Path) -> std::io::Result<String>,
    ) -> Result<Allocation, String> {
        let from_file = |path: &Path, source: String| {
            let text =
                read(path).map_err(|e| format!("cannot read the hostfile {} ({source}): {e}", path.display()))?;
            let nodes = parse_hostfile(&text).map_err(|e| format!("hostfile {} ({source}): {e}", path.display()))?;
            Ok(Allocation { nodes, source })
        };
        if let Some(list) = hosts {
            let nodes = expand_hostlist(list).map_err(|e| format!("--hosts {list:?}: {e}"))?;
            return Ok(Allocation { nodes, source: "--hosts".into() });
        }
        if let Some(path) = hostfile {
            return from_file(path, format!("--hostfile {}", path.display()));
        }
        if let Some(list) = env("SLURM_JOB_NODELIST") {
            let nodes = expand_hostlist(&list).map_err(|e| format!("SLURM_JOB_NODELIST={list:?}: {e}"))?;
            return Ok(Allocation { nodes, source: "SLURM_JOB_NODELIST".into() });
        }
        for var in MPI_HOSTFILE_VARS {
            if let Some(path) = env(var).filter(|p| !p.is_empty()) {
                return from_file(&PathBuf::from(&path), var.to_string());
            }
        }
        Ok(Allocation { nodes: vec![surge_cluster::hostname()], source: "this host".into() })
    }

    pub fn is_multi_node(&self) -> bool {
        self.nodes.len() > 1
    }
}

/// The job's id: `slurm-<SLURM_JOB_ID>` under Slurm (what `sacct -j` takes),
/// else `run-<unix seconds>-<pid>`. It names the job's buffer, cluster and
/// profile, so it must be a safe file name.
pub fn job_id(now: Duration) -> Result<String, String> {
    job_id_from(std::env::var("SLURM_JOB_ID").ok(), now, std::process::id())
}

fn job_id_from(slurm_job: Option<String>, now: Duration, pid: u32) -> Result<String, String> {
    match slurm_job {
        Some(id) if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) => Ok(format!("slurm-{id}")),
        Some(id) => {
            Err(format!("SLURM_JOB_ID={id:?} is not a Slurm job id (digits only): unset it, or run inside a Slurm job"))
        }
        None => Ok(format!("run-{}-{pid}", now.as_secs())),
    }
}

/// Expands a host list in Slurm's compressed syntax (`node[01-04,07],gpu3,
/// rack[1-2]-n[1-2]`): commas outside brackets separate names, each bracket
/// holds numbers and ranges, a range keeps the zero padding of its first
/// number, and several brackets in one name expand left to right (the
/// leftmost varies slowest), as `scontrol show hostnames` does.
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    for item in split_outside_brackets(list)? {
        if item.is_empty() {
            return Err("an empty host name (two commas in a row, or one at an end)".into());
        }
        expand_item(item, &mut hosts)?;
    }
    if hosts.is_empty() {
        return Err("no host names in it".into());
    }
    Ok(dedup_in_order(hosts))
}

/// Splits at commas that are not inside `[...]`, checking the brackets pair up.
fn split_outside_brackets(list: &str) -> Result<Vec<&str>, String> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (at, c) in list.char_indices() {
        match c {
            '[' if depth == 0 => depth = 1,
            '[' => return Err(format!("a bracket inside a bracket at character {}", at + 1)),
            ']' if depth == 1 => depth = 0,
            ']' => return Err(format!("a ']' without its '[' at character {}", at + 1)),
            ',' if depth == 0 => {
                items.push(list[start..at].trim());
                start = at + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("a '[' without its ']'".into());
    }
    items.push(list[start..].trim());
    Ok(items)
}

/// Expands one name with any number of bracket groups into `out`.
fn expand_item(item: &str, out: &mut Vec<String>) -> Result<(), String> {
    let mut names = vec![String::new()];
    let mut rest = item;
    while !rest.is_empty() {
        let (literal, after) = rest.split_once('[').unwrap_or((rest, ""));
        check_name_chars(literal, item)?;
        names.iter_mut().for_each(|n| n.push_str(literal));
        if after.is_empty() && !rest.contains('[') {
            break;
        }
        let (inside, tail) = after.split_once(']').ok_or_else(|| format!("{item:?}: a '[' without its ']'"))?;
        let numbers = expand_ranges(inside).map_err(|e| format!("{item:?}: [{inside}]: {e}"))?;
        if names.len().saturating_mul(numbers.len()) + out.len() > MAX_HOSTS {
            return Err(format!("{item:?} expands to more than {MAX_HOSTS} hosts"));
        }
        names = names.iter().flat_map(|n| numbers.iter().map(move |x| format!("{n}{x}"))).collect();
        rest = tail;
    }
    if names.iter().any(String::is_empty) {
        return Err("an empty host name".into());
    }
    out.extend(names);
    Ok(())
}

/// `01-04,07` → `01 02 03 04 07`.
fn expand_ranges(inside: &str) -> Result<Vec<String>, String> {
    let mut numbers = Vec::new();
    for part in inside.split(',').map(str::trim) {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let parse = |s: &str| -> Result<u64, String> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("{part:?} is not a number or a range of numbers such as 01-04"));
            }
            s.parse().map_err(|_| format!("{s} is too large"))
        };
        let (first, last) = (parse(lo)?, parse(hi)?);
        if last < first {
            return Err(format!("the range {part} runs backwards"));
        }
        if last - first >= MAX_HOSTS as u64 || numbers.len() + (last - first) as usize >= MAX_HOSTS {
            return Err(format!("the range {part} has more than {MAX_HOSTS} numbers"));
        }
        numbers.extend((first..=last).map(|n| format!("{n:0width$}", width = lo.len())));
    }
    Ok(numbers)
}

/// Host names are DNS labels and dots (or IP addresses): anything else is a typo.
fn check_name_chars(part: &str, whole: &str) -> Result<(), String> {
    match part.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'))) {
        Some(c) => Err(format!("{whole:?}: {c:?} cannot be part of a host name")),
        None => Ok(()),
    }
}

/// The hosts of an Open MPI / PRRTE hostfile: one host per line, optionally
/// followed by `slots=N` and `max_slots=N` (or `max-slots=N`); `#` starts a
/// comment. A host listed twice counts once (its slots do not matter here:
/// Surge runs one `surge start` per node).
pub fn parse_hostfile(text: &str) -> Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("");
        let mut words = line.split_whitespace();
        let Some(host) = words.next() else { continue };
        let at = |what: String| format!("line {}: {what}", n + 1);
        if host.contains('=') {
            return Err(at(format!("{host:?} comes before the host name")));
        }
        check_name_chars(host, host).map_err(at)?;
        for word in words {
            let (key, value) = word.split_once('=').ok_or_else(|| at(format!("{word:?}: expected slots=N")))?;
            if !matches!(key, "slots" | "max_slots" | "max-slots") {
                return Err(at(format!("unknown setting {key:?} (known: slots, max_slots)")));
            }
            if value.parse::<u32>().is_err() {
                return Err(at(format!("{key}={value:?}: expected a whole number")));
            }
        }
        hosts.push(host.to_string());
    }
    if hosts.is_empty() {
        return Err("no hosts in it (one host per line, e.g. `node01 slots=4`)".into());
    }
    Ok(dedup_in_order(hosts))
}

fn dedup_in_order(hosts: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    hosts.into_iter().filter(|h| seen.insert(h.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn expand(list: &str) -> Vec<String> {
        expand_hostlist(list).unwrap_or_else(|e| panic!("{list}: {e}"))
    }

    #[test]
    fn slurm_host_lists_expand_with_their_padding_and_in_order() {
        assert_eq!(expand("node[01-04,07],gpu3"), ["node01", "node02", "node03", "node04", "node07", "gpu3"]);
        assert_eq!(expand("rack[1-2]-n[1-2]"), ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]);
        assert_eq!(expand("n[8-10]"), ["n8", "n9", "n10"]);
        assert_eq!(expand("n[098-101]"), ["n098", "n099", "n100", "n101"]);
        assert_eq!(expand("a, b ,c"), ["a", "b", "c"]);
        assert_eq!(expand("10.1.2.3,10.1.2.4"), ["10.1.2.3", "10.1.2.4"]);
        assert_eq!(expand("[1-2]x"), ["1x", "2x"]);
        assert_eq!(expand("n1,n[1-2],n1"), ["n1", "n2"], "a host listed twice is one node");
    }

    #[test]
    fn malformed_host_lists_are_errors_that_say_what_is_wrong() {
        for (bad, why) in [
            ("", "empty host name"),
            ("a,,b", "empty host name"),
            ("a,", "empty host name"),
            ("node[1-3", "without its ']'"),
            ("node1-3]", "without its '['"),
            ("node[[1]]", "inside a bracket"),
            ("node[3-1]", "runs backwards"),
            ("node[a-b]", "not a number"),
            ("node[]", "not a number"),
            ("node[1-]", "not a number"),
            ("node[1,,2]", "not a number"),
            ("node[-5]", "not a number"),
            ("node[0-999999999]", "more than"),
            ("n[0-999]m[0-999]", "more than"),
            ("node[99999999999999999999]", "too large"),
            ("no de", "cannot be part of a host name"),
            ("nöde", "cannot be part of a host name"),
        ] {
            assert_refused(expand_hostlist, bad, why);
        }
    }

    /// `parse(bad)` fails, saying `why`.
    fn assert_refused<T: std::fmt::Debug>(parse: impl Fn(&str) -> Result<T, String>, bad: &str, why: &str) {
        let e = parse(bad).err().unwrap_or_else(|| panic!("{bad:?} was accepted"));
        assert!(e.contains(why), "{bad:?}: {e}");
    }

    #[test]
    fn hostfiles_give_their_hosts_and_refuse_what_they_cannot_mean() {
        let text =
            "# the job's nodes\nnode01 slots=4\n\n  node02 slots=4 max_slots=8 # big\nnode01 slots=2\n10.0.0.9\n";
        assert_eq!(parse_hostfile(text).unwrap(), ["node01", "node02", "10.0.0.9"]);
        for (bad, why) in [
            ("", "no hosts"),
            ("# only a comment\n", "no hosts"),
            ("node01 slots=four\n", "line 1: slots=\"four\": expected a whole number"),
            ("node01\nnode02 cpus=4\n", "line 2: unknown setting \"cpus\""),
            ("node01 4\n", "expected slots=N"),
            ("slots=4 node01\n", "comes before the host name"),
            ("node/01\n", "cannot be part of a host name"),
        ] {
            assert_refused(parse_hostfile, bad, why);
        }
    }

    fn detect(hosts: Option<&str>, hostfile: Option<&str>, env: &[(&str, &str)]) -> Result<Allocation, String> {
        let env: HashMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let files = |path: &Path| match path.to_str() {
            Some("/hf") => Ok("h1 slots=2\nh2\n".to_string()),
            _ => Err(std::io::Error::from(std::io::ErrorKind::NotFound)),
        };
        Allocation::from_sources(hosts, hostfile.map(Path::new), |k| env.get(k).cloned(), &files)
    }

    #[test]
    fn the_first_source_found_names_the_nodes() {
        let slurm = [("SLURM_JOB_NODELIST", "c[1-3]"), ("OMPI_MCA_orte_default_hostfile", "/hf")];
        let a = detect(Some("x,y"), Some("/hf"), &slurm).unwrap();
        assert_eq!((a.nodes, a.source.as_str()), (vec!["x".to_string(), "y".into()], "--hosts"));
        let a = detect(None, Some("/hf"), &slurm).unwrap();
        assert_eq!((a.nodes, a.source.as_str()), (vec!["h1".to_string(), "h2".into()], "--hostfile /hf"));
        let a = detect(None, None, &slurm).unwrap();
        assert_eq!((a.nodes.len(), a.source.as_str()), (3, "SLURM_JOB_NODELIST"));
        let a = detect(None, None, &slurm[1..]).unwrap();
        assert_eq!(a.source, "OMPI_MCA_orte_default_hostfile");
        let a = detect(None, None, &[("PRTE_MCA_prte_default_hostfile", "/hf")]).unwrap();
        assert!(a.is_multi_node());
        let a = detect(None, None, &[]).unwrap();
        assert!(!a.is_multi_node());
        assert_eq!((a.nodes, a.source.as_str()), (vec![surge_cluster::hostname()], "this host"));
    }

    #[test]
    fn an_unreadable_or_malformed_source_is_named_in_the_error() {
        let e = detect(None, Some("/missing"), &[]).unwrap_err();
        assert!(e.contains("cannot read the hostfile /missing (--hostfile /missing)"), "{e}");
        let e = detect(None, None, &[("PRTE_MCA_prte_default_hostfile", "/missing")]).unwrap_err();
        assert!(e.contains("PRTE_MCA_prte_default_hostfile"), "{e}");
        let e = detect(None, None, &[("SLURM_JOB_NODELIST", "n[1-")]).unwrap_err();
        assert!(e.starts_with("SLURM_JOB_NODELIST=\"n[1-\""), "{e}");
        let e = detect(Some("a,,b"), None, &[]).unwrap_err();
        assert!(e.starts_with("--hosts \"a,,b\""), "{e}");
    }

    #[test]
    fn the_job_id_is_slurms_when_slurm_runs_the_job() {
        let now = Duration::from_secs(1_700_000_000);
        assert_eq!(job_id_from(Some("4242".into()), now, 7).unwrap(), "slurm-4242");
        assert_eq!(job_id_from(None, now, 7).unwrap(), "run-1700000000-7");
        for bad in ["", "42/../x", "abc"] {
            let e = job_id_from(Some(bad.into()), now, 7).unwrap_err();
            assert!(e.contains("not a Slurm job id"), "{bad:?}: {e}");
        }
    }
}
