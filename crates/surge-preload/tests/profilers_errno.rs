//! What programs see beyond their bytes: errno after calls that succeeded
//! (netCDF reads it after a short read), netCDF's own tools on its three
//! file formats, and profilers preloaded beside the interposer (Darshan)
//! that must see every byte the program moved on Surge and none of
//! Surge's own files. Each runs on a plain directory and under `surge run`
//! in every mode, through the harness in `common`.

mod common;

use common::{text, workload, Scenario};
use std::process::Command;

/// workloads/errno_kept.c sets errno to a sentinel before each call the
/// shim wraps and prints whether the call kept it: the output on Surge
/// must be the plain directory's, where libc keeps it.
#[test]
fn every_wrapped_call_that_succeeds_leaves_errno_as_it_was_in_every_mode() {
    let prog = workload("errno_kept");
    Scenario::new("errno").compare(&format!("mkdir -p $D && {} $D > $O/errno", prog.display()));
}

/// netCDF's tools (Debian's netcdf-bin), or why not.
fn netcdf_ready(test: &str) -> Option<()> {
    let ready = match Command::new("ncdump").output() {
        // ncdump without arguments prints its usage and exits 1.
        Ok(out) if text(&out).contains("ncdump") => Ok(()),
        Ok(out) => Err(format!("ncdump does not run: {}", text(&out))),
        Err(e) => Err(format!("netCDF's tools are not installed (scripts/setup.sh installs netcdf-bin): {e}")),
    };
    surge_testkit::skip_unless_ready(test, ready)
}

/// netCDF, the file format of most climate and weather codes, on its
/// three formats: classic and 64-bit offset (netCDF's own posixio, which
/// takes a short read with errno set for an error) and netCDF-4 (HDF5).
#[test]
fn netcdf_ncgen_ncdump_and_nccopy_on_classic_64_bit_offset_and_netcdf_4_files_in_every_mode() {
    if netcdf_ready("netcdf_ncgen_ncdump_and_nccopy_on_classic_64_bit_offset_and_netcdf_4_files_in_every_mode")
        .is_none()
    {
        return;
    }
    Scenario::new("netcdf").compare(
        r#"
        mkdir -p $D
        cat > $D/climate.cdl <<'CDL'
netcdf climate {
dimensions:
    time = UNLIMITED ;
    lat = 4 ;
    lon = 5 ;
variables:
    double time(time) ;
        time:units = "days since 2000-01-01" ;
    float lat(lat) ;
    float lon(lon) ;
    float tas(time, lat, lon) ;
        tas:long_name = "near-surface air temperature" ;
        tas:units = "K" ;
    int flag(lat) ;
        :title = "Surge netCDF scenario" ;
data:
    time = 0, 1, 2 ;
    lat = -45, -15, 15, 45 ;
    lon = 0, 72, 144, 216, 288 ;
    tas = 270.5, 271, 272, 273, 274, 275, 276, 277, 278, 279, 280, 281, 282, 283, 284, 285, 286, 287, 288, 289,
          270.5, 271, 272, 273, 274, 275, 276, 277, 278, 279, 280, 281, 282, 283, 284, 285, 286, 287, 288, 289,
          270.5, 271, 272, 273, 274, 275, 276, 277, 278, 279, 280, 281, 282, 283, 284, 285, 286, 287, 288, 289 ;
    flag = 1, 2, 3, 4 ;
}
CDL
        cd $D
        ncgen -k classic -o classic.nc climate.cdl
        ncgen -k 64-bit-offset -o offset64.nc climate.cdl
        ncgen -k netCDF-4 -o nc4.nc climate.cdl
        for f in classic offset64 nc4; do
            ncdump -k $f.nc > $O/$f.kind
            ncdump $f.nc > $O/$f.cdl
            ncdump -v tas -f c $f.nc > $O/$f.tas
        done
        nccopy -k netCDF-4 classic.nc classic-to-nc4.nc
        nccopy -k classic classic-to-nc4.nc back-to-classic.nc
        nccopy -k 64-bit-offset nc4.nc nc4-to-offset64.nc
        ncdump classic-to-nc4.nc > $O/classic-to-nc4.cdl
        ncdump nc4-to-offset64.nc > $O/nc4-to-offset64.cdl
        cmp classic.nc back-to-classic.nc && echo "the round trip gives the classic file back" > $O/round-trip
        "#,
    );
}
