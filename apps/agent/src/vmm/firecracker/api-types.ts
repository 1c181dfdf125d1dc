/**
 * Request and response bodies of the Firecracker API, hand-written from its published
 * Swagger 2.0 description (v1.16.1, `definitions`). Only the parts doppiobox sends or
 * reads are typed; field names and enums follow the description exactly, and the
 * contract tests validate every request against it.
 */

interface TokenBucket {
  size: number;
  refill_time: number;
  one_time_burst?: number;
}

interface RateLimiter {
  bandwidth?: TokenBucket;
  ops?: TokenBucket;
}

export interface BootSource {
  kernel_image_path: string;
  boot_args?: string;
  initrd_path?: string;
}

/** virtio-block drive (the vhost-user `socket` variant is not used). */
export interface Drive {
  drive_id: string;
  is_root_device: boolean;
  path_on_host: string;
  is_read_only: boolean;
  partuuid?: string;
  cache_type?: "Unsafe" | "Writeback";
  io_engine?: "Sync" | "Async";
  rate_limiter?: RateLimiter;
}

export interface NetworkInterface {
  iface_id: string;
  host_dev_name: string;
  guest_mac?: string;
  mtu?: number;
  rx_rate_limiter?: RateLimiter;
  tx_rate_limiter?: RateLimiter;
}

export interface MachineConfiguration {
  vcpu_count: number;
  mem_size_mib: number;
  smt?: boolean;
  track_dirty_pages?: boolean;
  huge_pages?: "None" | "2M";
}

export interface MmdsConfig {
  network_interfaces: string[];
  version?: "V1" | "V2";
  ipv4_address?: string;
  imds_compat?: boolean;
}

/** The MMDS store is free-form JSON (`additionalProperties: true`). */
export type MmdsContents = Record<string, unknown>;

export interface Logger {
  log_path?: string;
  level?: "Error" | "Warning" | "Info" | "Debug" | "Trace" | "Off";
  show_level?: boolean;
  show_log_origin?: boolean;
  module?: string;
}

export interface Metrics {
  metrics_path: string;
}

/** virtio-rng: lets a restored guest reseed from the host instead of the snapshot's pool. */
export interface EntropyDevice {
  rate_limiter?: RateLimiter;
}

export interface Balloon {
  amount_mib: number;
  deflate_on_oom: boolean;
  stats_polling_interval_s?: number;
  free_page_hinting?: boolean;
  free_page_reporting?: boolean;
}

export interface BalloonUpdate {
  amount_mib: number;
}

export type ActionType = "FlushMetrics" | "InstanceStart" | "SendCtrlAltDel";

export interface Vm {
  state: "Paused" | "Resumed";
}

export interface SnapshotCreateParams {
  snapshot_path: string;
  mem_file_path: string;
  snapshot_type?: "Full" | "Diff";
}

interface MemoryBackend {
  backend_type: "File" | "Uffd";
  backend_path: string;
}

interface NetworkOverride {
  iface_id: string;
  host_dev_name: string;
}

/**
 * `mem_backend` replaces the deprecated `mem_file_path`, and `track_dirty_pages` the
 * deprecated `enable_diff_snapshots`; the description allows exactly one `mem_*` field.
 */
export interface SnapshotLoadParams {
  snapshot_path: string;
  mem_backend: MemoryBackend;
  track_dirty_pages?: boolean;
  resume_vm?: boolean;
  network_overrides?: NetworkOverride[];
  clock_realtime?: boolean;
}

export interface InstanceInfo {
  app_name: string;
  id: string;
  state: "Not started" | "Running" | "Paused";
  vmm_version: string;
}

export interface FirecrackerVersion {
  firecracker_version: string;
}

export interface FaultBody {
  fault_message?: string;
}
