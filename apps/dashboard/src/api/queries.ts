import { billedMeters, type LedgerKind } from "@doppio/contracts";
import { useQuery } from "@tanstack/react-query";
import { ApiError, call } from "./client.ts";
import { keys } from "./keys.ts";

/** The signed-in user, or null when there is no session. */
export function useMe() {
  return useQuery({
    queryKey: keys.me,
    queryFn: async () => {
      try {
        return await call("getMe", {});
      } catch (err) {
        if (err instanceof ApiError && err.status === 401) return null;
        throw err;
      }
    },
    staleTime: 60_000,
  });
}

export function useBoxes() {
  return useQuery({
    queryKey: keys.boxes,
    queryFn: async () => (await call("listBoxes", {})).boxes,
  });
}

export function useBox(slug: string) {
  return useQuery({ queryKey: keys.box(slug), queryFn: () => call("getBox", { params: { slug } }) });
}

export function useJobs(slug: string) {
  return useQuery({
    queryKey: keys.jobs(slug),
    queryFn: async () => (await call("listBoxJobs", { params: { slug } })).jobs,
  });
}

export function useTemplates() {
  return useQuery({
    queryKey: keys.templates,
    queryFn: async () => (await call("listTemplates", {})).templates,
    staleTime: 60_000,
  });
}

export function useTokens() {
  return useQuery({
    queryKey: keys.tokens,
    queryFn: async () => (await call("listTokens", {})).tokens,
  });
}

/** Servers carry heartbeat times the page ages live; refetch now and then to see new beats. */
export function useServers() {
  return useQuery({
    queryKey: keys.servers,
    queryFn: async () => (await call("listServers", {})).servers,
    refetchInterval: 15_000,
  });
}

/** The wallet ticks as boxes run; refetched every minute and on every `wallet` event. */
/** How often the wallet is read again while one of the user's boxes is billed for compute. */
const WALLET_LIVE_MS = 10_000;

/**
 * The wallet; read again every WALLET_LIVE_MS while a box runs (its cost moves with each
 * settlement), else every minute. Crossing the warning threshold or zero comes at once
 * over the event stream (events.ts).
 */
export function useWallet() {
  return useQuery({
    queryKey: keys.wallet,
    queryFn: () => call("getWallet", {}),
    refetchInterval: (q) =>
      q.state.data?.boxes.some((b) => billedMeters(b.status).compute) ? WALLET_LIVE_MS : 60_000,
  });
}

export function useLedger(kind: LedgerKind | "") {
  return useQuery({
    queryKey: keys.ledger(kind),
    queryFn: async () => (await call("listLedger", { query: kind ? { kind } : {} })).entries,
  });
}

/** The user's recent card top-ups; refreshed by every `topup` event. */
export function useTopUps() {
  return useQuery({
    queryKey: keys.topUps,
    queryFn: async () => (await call("listTopUps", {})).topUps,
  });
}

export function useInvoices() {
  return useQuery({
    queryKey: keys.invoices,
    queryFn: async () => (await call("listInvoices", {})).invoices,
  });
}

/** The signed-in user's GitHub connection (linked account, installations, repositories). */
export function useGitHub() {
  return useQuery({ queryKey: keys.github, queryFn: () => call("getGitHub", {}) });
}
