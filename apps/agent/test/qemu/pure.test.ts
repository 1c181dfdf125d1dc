import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { type BoxMetadata, METADATA_SIZE } from "../../src/vmm/executor.ts";
import { parseTscKhz } from "../../src/vmm/qemu/accel.ts";
import {
  type Accel,
  kernelCmdline,
  type LaunchSpec,
  qemuArgs,
  TCG_CODE_BUFFER_MB,
} from "../../src/vmm/qemu/args.ts";
import { VMM_UID_BASE, vmmIdentity } from "../../src/vmm/qemu/confine.ts";
import { boxPaths, goldenBuildPaths } from "../../src/vmm/qemu/layout.ts";
import { encodeMetadata, encodeShellMetadata, SHELL_METADATA_SIZE } from "../../src/vmm/qemu/metadata.ts";

const meta: BoxMetadata = {
  slug: "brisk-falcon-3f9a",
  site_url: "https://brisk-falcon-3f9a.site.example",
  code_url: "https://brisk-falcon-3f9a.code.example",
  env: { A: "1" },
  network: { ip: "10.0.0.2", prefix: 16, gateway: "10.0.0.1", mac: "06:00:0a:00:00:02", dns: [] },
  metadata_url: "http://10.0.0.1:8169",
  secrets: {
    machine_id: "m",
    seed: "s",
    db_password: "d",
    encryption_key: "e",
    admin_password: "a",
    metadata_token: "t",
  },
  issued_at: 1,
  generation: 7,
};

describe("encodeMetadata", () => {
  it("puts generation first and pads with spaces to METADATA_SIZE", () => {
    const buf = encodeMetadata(meta);
    expect(buf.length).toBe(METADATA_SIZE);
    const text = buf.toString("utf8");
    expect(text.startsWith('{"generation":7,')).toBe(true);
    expect(JSON.parse(text)).toEqual(meta);
    expect(text.trimEnd().length).toBeLessThan(METADATA_SIZE);
  });

  it("refuses metadata larger than the fixed size", () => {
    expect(() => encodeMetadata({ ...meta, env: { BIG: "x".repeat(METADATA_SIZE) } })).toThrow(/more than/);
  });
});

/**
 * Sources `script` in a POSIX shell (as the guest's apply sources the blob) and returns the
 * values of `names` after it, plus the names of every variable it set starting with `prefix`.
 */
function sourced(
  script: Buffer | string,
  names: string[],
  prefix = "M_",
): { values: string[]; set: string[] } {
  const dir = mkdtempSync(join(tmpdir(), "shell-meta-"));
  try {
    const file = join(dir, "blob");
    writeFileSync(file, script);
    const out = execFileSync("sh", [
      "-c",
      String.raw`. "$1"; shift; p=$1; shift; for v; do eval "printf '%s\0' \"\$$v\""; done; set | grep "^$p" | cut -d= -f1`,
      "sh",
      file,
      prefix,
      ...names,
    ]).toString("utf8");
    const parts = out.split("\0");
    return { values: parts.slice(0, names.length), set: parts[names.length]!.split("\n").filter(Boolean) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe("encodeShellMetadata", () => {
  it("gives the guest the same variables as json.awk, generation first, padded to one page", () => {
    const buf = encodeShellMetadata({ ...meta, network: { ...meta.network, dns: ["10.0.0.1", "1.1.1.1"] } });
    expect(buf.length).toBe(SHELL_METADATA_SIZE);
    expect(buf.toString("utf8").startsWith("M_generation='7'\n")).toBe(true);
    const names = [
      "M_generation",
      "M_slug",
      "M_network_ip",
      "M_network_prefix",
      "M_network_dns_0",
      "M_network_dns_1",
      "M_secrets_machine_id",
      "M_secrets_metadata_token",
      "M_issued_at",
      "M_env_file",
    ];
    const { values, set } = sourced(buf, names);
    expect(values).toEqual([
      "7",
      "brisk-falcon-3f9a",
      "10.0.0.2",
      "16",
      "10.0.0.1",
      "1.1.1.1",
      "m",
      "t",
      "1",
      "export A='1'\n",
    ]);
    // env reaches the guest only as the env file's text.
    expect(set.filter((k) => k.startsWith("M_env"))).toEqual(["M_env_file"]);
  });

  it("quotes every value: a tenant's env and repo cannot run anything in the guest", () => {
    const hostile = {
      ...meta,
      repo: "https://github.com/a/b'; touch /tmp/pwned; '",
      env: {
        // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell expansion, on purpose
        QUOTE: 'it\'s $(id) `id` ${HOME} \\ "x"',
        LINES: "a\nb\tc",
        NUL: "a\0b",
        "bad-name; id": "dropped",
        EMPTY: "",
      },
    };
    const blob = sourced(encodeShellMetadata(hostile), ["M_repo", "M_env_file"]);
    expect(blob.values[0]).toBe(hostile.repo);
    // The env file is itself sourced by login shells: check what it sets.
    const env = sourced(blob.values[1]!, ["QUOTE", "LINES", "NUL", "EMPTY"], "bad");
    expect(env.values).toEqual([hostile.env.QUOTE, hostile.env.LINES, "a?b", ""]);
    expect(blob.values[1]).not.toContain("bad-name");
  });

  it("is padding only when the assignments do not fit (the guest then parses the JSON)", () => {
    const buf = encodeShellMetadata({ ...meta, env: { BIG: "x".repeat(SHELL_METADATA_SIZE) } });
    expect(buf.length).toBe(SHELL_METADATA_SIZE);
    expect(buf.toString("utf8").trim()).toBe("");
  });
});

describe("parseTscKhz", () => {
  it("reads cpu MHz as kHz", () => {
    expect(parseTscKhz("processor\t: 0\ncpu MHz\t\t: 2793.436\n")).toBe(2793436);
    expect(parseTscKhz("nothing")).toBeNull();
  });
});

describe("qemuArgs", () => {
  const base: LaunchSpec = {
    accel: "tcg",
    tcgCodeBufferMb: TCG_CODE_BUFFER_MB,
    tscKhz: 2793436,
    memoryMb: 256,
    vcpu: 1,
    kernel: "/i/vmlinuz",
    initrd: "/i/initrd.img",
    rootDisk: "/b/overlay.qcow2",
    dataDisk: { path: "/b/volume.raw", format: "raw" },
    net: { kind: "tap", tap: "dbx0a000002", mac: "06:00:0a:00:00:02" },
    metaFile: "/b/metadata.json",
    serialLog: "/b/serial.log",
    qmpSocket: "/b/qmp.sock",
    pidFile: "/b/qemu.pid",
  };
  const devices = (args: string[]) =>
    args.flatMap((a, i) => (args[i - 1] === "-device" ? [a.replace(/,(netdev|mac)=[^,]*/g, "")] : []));

  it("gives TCG guests the host TSC and KVM guests the host CPU", () => {
    expect(kernelCmdline("tcg", 2793436)).toContain("tsc_early_khz=2793436");
    expect(kernelCmdline("kvm", 2793436)).not.toContain("tsc_early_khz");
    expect(qemuArgs({ ...base, accel: "kvm" }).join(" ")).toContain("-cpu host");
  });

  it("bounds a TCG guest's translated code (QEMU's default is 1 GiB on top of the guest's RAM)", () => {
    const accel = (a: Accel) => {
      const args = qemuArgs({ ...base, accel: a, tcgCodeBufferMb: 96 });
      return args[args.indexOf("-accel") + 1];
    };
    expect(accel("tcg")).toBe("tcg,tb-size=96");
    expect(accel("kvm")).toBe("kvm");
  });

  it("puts user mode's slirp on the pool's golden address, DNS on the network address (cidr.ts), any allowed network", () => {
    const user = (ip: string, prefix: number) =>
      qemuArgs({
        ...base,
        net: {
          kind: "user",
          mac: "06:00:00:00:00:00",
          ip,
          prefix,
          gateway: "",
          forwards: [],
          guestForwards: [],
        },
      }).join(" ");
    expect(user("192.168.7.2", 29)).toContain("net=192.168.7.0/29,host=192.168.7.6,dns=192.168.7.0,");
    expect(() => user("10.0.0.2", 30)).toThrow(/between \/8 and \/29/);
  });

  it("keeps one device layout for golden (no backend), TAP and user-mode boxes", () => {
    const golden = qemuArgs({ ...base, net: { kind: "none", mac: "06:00:0a:00:ff:fe" } });
    const tap = qemuArgs(base);
    const user = qemuArgs({
      ...base,
      net: {
        kind: "user",
        mac: "06:00:0a:00:00:02",
        ip: "10.0.0.2",
        prefix: 16,
        gateway: "10.0.0.1",
        forwards: [{ hostPort: 41000, guestPort: 8000 }],
        guestForwards: [{ guestPort: 8169, hostPort: 8169 }],
      },
    });
    expect(devices(golden)).toEqual(devices(tap));
    expect(devices(user)).toEqual(devices(tap));
    expect(user.join(" ")).toContain("hostfwd=tcp:127.0.0.1:41000-10.0.0.2:8000");
    expect(user.join(" ")).toContain("net=10.0.0.0/16,host=10.0.255.254,dns=10.0.0.0,restrict=on");
    expect(user.join(" ")).toContain("guestfwd=tcp:10.0.0.1:8169-cmd:socat - TCP:127.0.0.1:8169");
  });

  it("restores paused from the migration stream it inherits as fd 3", () => {
    const args = qemuArgs({ ...base, incoming: "stream" });
    expect(args.slice(-3)).toEqual(["-S", "-incoming", "fd:3"]);
  });

  it("confines a box's VMM: its own uid from its address, QEMU's seccomp filter, no spawning unless user mode needs socat", () => {
    expect(vmmIdentity("10.0.0.2", 16)).toEqual({ uid: VMM_UID_BASE + 2, gid: VMM_UID_BASE + 2 });
    expect(vmmIdentity("10.0.3.7", 16).uid).toBe(VMM_UID_BASE + 3 * 256 + 7);
    expect(vmmIdentity("10.0.3.7", 24).uid).toBe(VMM_UID_BASE + 7);
    const tap = qemuArgs({ ...base, confine: { identity: vmmIdentity("10.0.0.2", 16), spawn: false } });
    expect(tap.slice(-4)).toEqual([
      "-runas",
      `${VMM_UID_BASE + 2}:${VMM_UID_BASE + 2}`,
      "-sandbox",
      "on,obsolete=deny,resourcecontrol=deny,spawn=deny",
    ]);
    const user = qemuArgs({ ...base, confine: { identity: null, spawn: true } });
    expect(user.slice(-2)).toEqual(["-sandbox", "on,obsolete=deny,resourcecontrol=deny,spawn=allow"]);
    expect(user).not.toContain("-runas");
    expect(qemuArgs(base)).not.toContain("-sandbox");
  });

  it("doubles commas in option values", () => {
    expect(qemuArgs({ ...base, rootDisk: "/odd,dir/o.qcow2" }).join(" ")).toContain("file=/odd,,dir/o.qcow2");
  });

  it("maps a mapped golden's RAM file shared for the build and private for a clone", () => {
    const golden = qemuArgs({ ...base, memoryFile: { path: "/g,1/memory", share: true } });
    expect(golden.slice(0, 4)).toEqual([
      "-M",
      "microvm,acpi=on,memory-backend=mem",
      "-object",
      `memory-backend-file,id=mem,size=${base.memoryMb}M,mem-path=/g,,1/memory,share=on`,
    ]);
    const clone = qemuArgs({
      ...base,
      memoryFile: { path: "/g/memory", share: false },
      incoming: "defer",
    });
    expect(clone[3]).toBe(`memory-backend-file,id=mem,size=${base.memoryMb}M,mem-path=/g/memory,share=off`);
    // The capability goes in over QMP before the stream is opened (mapped-ram.ts).
    expect(clone.slice(-3)).toEqual(["-S", "-incoming", "defer"]);
    expect(qemuArgs(base).join(" ")).not.toContain("memory-backend");
  });
});

describe("layout", () => {
  it("rejects slugs and template versions that are unsafe as paths", () => {
    expect(() => boxPaths("/d", "../etc")).toThrow();
    expect(() => goldenBuildPaths("/d", "minimal", "1;rm", "abcd")).toThrow();
    expect(boxPaths("/d", "brisk-falcon-3f9a").overlay).toBe("/d/boxes/brisk-falcon-3f9a/overlay.qcow2");
  });

  it("refuses data dirs that would overflow a unix socket path", () => {
    expect(() => boxPaths(`/${"x".repeat(80)}`, "brisk-falcon-3f9a")).toThrow(/too long/);
  });
});
