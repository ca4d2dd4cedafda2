//! Direct-to-PFS placement of cold checkpoints (`--drain-direct cold`,
//! docs/bbos.md) through real daemons and the client library: once the
//! period's data passes the buffer's capacity, a new checkpoint of the
//! coldest job (highest MTBF) is written to the PFS and read back from it,
//! a hot job's stays in the buffer, a PFS that refuses a write or fills
//! fails the writer, a restart keeps the file readable, and `off` places nothing.

use std::time::Duration;
use surge_client::{Client, ClientConfig, JobIdentity};
use surge_proto::{Layout, Tier};
use surge_testkit::cluster::Cluster;
use surge_testkit::device::SmallDevice;
use surge_testkit::{eventually, pattern};

const MIB: usize = 1 << 20;
const HOT: &str = "9001";
const COLD: &str = "9002";

/// The flags of the cluster: S = 2 × 12 MiB, rates given (no calibration).
fn flags(direct: &str) -> Vec<&str> {
    let drain = ["--drain", "bbos", "--drain-rates", "40,30,16,1", "--drain-period", "600"];
    let mut flags = vec!["--capacity", "12M"];
    flags.extend_from_slice(&drain);
    flags.extend_from_slice(&["--drain-direct", direct]);
    flags
}

fn client(c: &Cluster, job: &str) -> Client {
    let config = ClientConfig { job: JobIdentity::named(job), ..ClientConfig::from_env().unwrap() };
    Client::connect_with(&c.cluster_file(), config).unwrap()
}

fn write(client: &Client, path: &str, data: &[u8]) {
    let file = client.create(path, 0o644, Layout::INHERIT).unwrap();
    for (k, piece) in data.chunks(MIB).enumerate() {
        assert_eq!(file.write_at(piece, (k * MIB) as u64).unwrap(), piece.len(), "{path}");
    }
    file.fsync().unwrap();
}

fn read(client: &Client, path: &str, len: usize) -> Vec<u8> {
    let file = client.open(path, libc::O_RDONLY, 0).unwrap();
    let mut buf = vec![0u8; len + 1];
    let n = file.read_at(&mut buf, 0).unwrap();
    buf.truncate(n);
    buf
}

/// A cluster with `--drain-direct direct` where the hot job wrote more than
/// the buffer holds this period, and the cold job's client with `/cold` made.
fn past_capacity(direct: &str) -> (Cluster, Client) {
    let c = Cluster::start(2, &flags(direct));
    fill_past_capacity(&c);
    let cold = client(&c, COLD);
    cold.mkdir("/cold", 0o755).unwrap();
    (c, cold)
}

/// Two jobs with far apart MTBFs, and the hot one writing more than the
/// buffer holds, so that DWSF passes S.
fn fill_past_capacity(c: &Cluster) {
    let hot = client(c, HOT);
    hot.set_mtbf(JobIdentity::named(HOT).id, 60).unwrap();
    hot.set_mtbf(JobIdentity::named(COLD).id, 86_400 * 30).unwrap();
    hot.mkdir("/hot", 0o755).unwrap();
    for version in 0..8 {
        write(&hot, &format!("/hot/ckpt_{version:03}"), &pattern(version, 4 * MIB));
    }
    eventually("DWSF passes the buffer's capacity", Duration::from_secs(30), || {
        let r = hot.drain_status().unwrap();
        r.capacity > 0 && r.dwsf > r.capacity
    });
}

#[test]
fn a_cold_checkpoint_goes_to_the_pfs_reads_back_and_survives_a_restart_and_a_hot_one_stays() {
    let (c, cold) = past_capacity("cold");
    let data = pattern(77, 5 * MIB + 123);
    write(&cold, "/cold/ckpt_001", &data);
    let host = c.pfs().join("cold/ckpt_001");
    assert_eq!(std::fs::read(&host).unwrap(), data, "the checkpoint is on the PFS, written in place");
    assert_eq!(cold.stat("/cold/ckpt_001").unwrap().tier, Tier::Pfs);
    assert_eq!(read(&cold, "/cold/ckpt_001", data.len()), data);
    // A hot job's new checkpoint stays in the buffer.
    let hot = client(&c, HOT);
    write(&hot, "/hot/ckpt_100", &pattern(100, MIB));
    assert_ne!(hot.stat("/hot/ckpt_100").unwrap().tier, Tier::Pfs);
    let r = hot.drain_status().unwrap();
    assert_eq!((r.placement.as_str(), r.direct_files, r.direct_bytes), ("cold", 1, data.len() as u64), "{r:#?}");
    let text = c.ok(&["drain", "status"]);
    assert!(text.contains("placement: cold; 1 file(s) placed on the PFS directly"), "{text}");

    // A PFS that loses the file under its writer: the writer gets an error, never silence.
    let file = cold.create("/cold/ckpt_002", 0o644, Layout::INHERIT).unwrap();
    assert_eq!(cold.stat("/cold/ckpt_002").unwrap().tier, Tier::Pfs);
    file.write_at(&pattern(2, MIB), 0).unwrap();
    std::fs::remove_file(c.pfs().join("cold/ckpt_002")).unwrap();
    let failed = file.write_at(&pattern(2, MIB), MIB as u64).unwrap_err();
    assert_eq!(failed.errno(), libc::ENOENT, "{failed}");
    drop(file);

    // A PFS where the checkpoint's directory cannot be made (a link out of the PFS
    // is in the way): it goes to the buffer instead, and nothing outside is written.
    let outside = c.local("outside");
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, c.pfs().join("blocked")).unwrap();
    cold.mkdir("/blocked", 0o755).unwrap();
    let blocked = pattern(3, MIB);
    write(&cold, "/blocked/ckpt_003", &blocked);
    assert_ne!(cold.stat("/blocked/ckpt_003").unwrap().tier, Tier::Pfs);
    assert_eq!(read(&cold, "/blocked/ckpt_003", blocked.len()), blocked);
    let r = cold.drain_status().unwrap();
    assert!(r.last_error.contains("/blocked/ckpt_003 could not be placed on the PFS directly"), "{r:#?}");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);

    // A PFS that fills under a direct writer: ENOSPC reaches the writer, at a
    // write or at the fsync that verifies, never a checkpoint cut short in silence.
    let test = "a_cold_checkpoint_goes_to_the_pfs_reads_back_and_survives_a_restart_and_a_hot_one_stays (full PFS)";
    if let Some(_device) = SmallDevice::mount(test, &c.pfs().join("full"), "2m") {
        // The mounted directory is on the PFS already, so in the namespace too.
        let file = cold.create("/full/ckpt_004", 0o644, Layout::INHERIT).unwrap();
        assert_eq!(cold.stat("/full/ckpt_004").unwrap().tier, Tier::Pfs);
        let failed = pattern(4, 4 * MIB)
            .chunks(MIB)
            .enumerate()
            .try_for_each(|(k, piece)| file.write_at(piece, (k * MIB) as u64).map(drop))
            .and_then(|()| file.fsync())
            .unwrap_err();
        assert_eq!(failed.errno(), libc::ENOSPC, "{failed}");
    }

    // Another rank of the same checkpoint writes it on the PFS too.
    let rank = cold.open("/cold/ckpt_001", libc::O_WRONLY, 0).unwrap();
    rank.write_at(b"rank 1", 0).unwrap();
    rank.fsync().unwrap();
    let mut expected = data.clone();
    expected[..6].copy_from_slice(b"rank 1");
    assert_eq!(std::fs::read(&host).unwrap(), expected);
    drop(rank);

    // The daemons stopped and started again on the same directories: still readable.
    c.ok(&["stop"]);
    let (buffer, pfs) = (c.buffer(), c.pfs());
    let mut again =
        vec!["start", "--daemons", "2", "--buffer", buffer.to_str().unwrap(), "--pfs", pfs.to_str().unwrap()];
    again.extend(flags("cold"));
    c.ok(&again);
    let cold = client(&c, COLD);
    assert_eq!(cold.stat("/cold/ckpt_001").unwrap().tier, Tier::Pfs);
    assert_eq!(read(&cold, "/cold/ckpt_001", data.len()), expected);
}

#[test]
fn with_direct_placement_off_the_cold_checkpoint_stays_in_the_buffer() {
    let (_cluster, cold) = past_capacity("off");
    let data = pattern(77, 2 * MIB);
    write(&cold, "/cold/ckpt_001", &data);
    assert_ne!(cold.stat("/cold/ckpt_001").unwrap().tier, Tier::Pfs);
    assert_eq!(read(&cold, "/cold/ckpt_001", data.len()), data);
    let r = cold.drain_status().unwrap();
    assert_eq!((r.placement.as_str(), r.direct_files, r.direct_bytes), ("off", 0, 0), "{r:#?}");
}
