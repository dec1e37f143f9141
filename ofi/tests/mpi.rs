//! Open MPI over libfabric over xfer: NetPIPE (`NPopenmpi`) between two ranks
//! through the ofi MTL with provider `xfer` on loopback. Not part of
//! `make test` (Open MPI is not a build dependency): run it with
//! `apt-get install openmpi-bin netpipe-openmpi` and
//! `cargo test -p xfer-ofi --test mpi -- --ignored`.

mod common;

use std::time::Duration;

use common::{check, fi_command, wait_output};

#[test]
#[ignore = "needs openmpi-bin and netpipe-openmpi"]
fn netpipe_over_the_ofi_mtl() {
    let dir = common::provider_dir();
    let child = fi_command("mpirun")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .args(["-np", "2", "--oversubscribe"])
        .args([
            "--mca",
            "pml",
            "cm",
            "--mca",
            "mtl",
            "ofi",
            "--mca",
            "mtl_ofi_provider_include",
            "xfer",
        ])
        .args(["-x", "FI_PROVIDER=xfer", "-x", "XFER_TCP_ADDR=127.0.0.1"])
        .arg("-x")
        .arg(format!("FI_PROVIDER_PATH={}", dir.display()))
        .args(["NPopenmpi", "-u", "65536"])
        .current_dir(std::env::temp_dir()) // NetPIPE writes np.out where it runs
        .spawn()
        .expect("mpirun not found: apt-get install openmpi-bin netpipe-openmpi");
    let out = wait_output(child, "mpirun NPopenmpi", Duration::from_secs(600));
    check("mpirun NPopenmpi over xfer", &out);
    // NetPIPE prints its table on stderr.
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.lines().any(|l| l.contains("65536 bytes")), "{text}");
}
