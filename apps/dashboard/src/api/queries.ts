import type { ApiToken, Box, Job, Me, Server, Template } from "@doppio/contracts";
import { useQuery } from "@tanstack/react-query";
import { ApiError, api } from "./client.ts";
import { keys } from "./keys.ts";

/** The signed-in user, or null when there is no session. */
export function useMe() {
  return useQuery({
    queryKey: keys.me,
    queryFn: async () => {
      try {
        return await api<Me>("GET", "/me");
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
    queryFn: async () => (await api<{ boxes: Box[] }>("GET", "/boxes")).boxes,
  });
}

export function useBox(slug: string) {
  return useQuery({ queryKey: keys.box(slug), queryFn: () => api<Box>("GET", `/boxes/${slug}`) });
}

export function useJobs(slug: string) {
  return useQuery({
    queryKey: keys.jobs(slug),
    queryFn: async () => (await api<{ jobs: Job[] }>("GET", `/boxes/${slug}/jobs`)).jobs,
  });
}

export function useTemplates() {
  return useQuery({
    queryKey: keys.templates,
    queryFn: async () => (await api<{ templates: Template[] }>("GET", "/templates")).templates,
    staleTime: 60_000,
  });
}

export function useTokens() {
  return useQuery({
    queryKey: keys.tokens,
    queryFn: async () => (await api<{ tokens: ApiToken[] }>("GET", "/tokens")).tokens,
  });
}

/** Servers carry heartbeat times the page ages live; refetch now and then to see new beats. */
export function useServers() {
  return useQuery({
    queryKey: keys.servers,
    queryFn: async () => (await api<{ servers: Server[] }>("GET", "/servers")).servers,
    refetchInterval: 15_000,
  });
}
