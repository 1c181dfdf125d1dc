/** `held`: taken beside `used` by something other than boxes (a server's warm pools). */
export function UsageBar({
  label,
  used,
  held = 0,
  heldBy = "",
  total,
  unit,
}: {
  label: string;
  used: number;
  held?: number;
  heldBy?: string;
  total: number;
  unit: string;
}) {
  const pct = total > 0 ? Math.min(100, Math.round(((used + held) / total) * 100)) : 0;
  return (
    <div className="usage">
      <div className="usage-text">
        <span>{label}</span>
        <span className="muted">
          {used}
          {held > 0 && ` + ${held} ${heldBy}`} / {total} {unit}
        </span>
      </div>
      {/* The numbers above say it; the bar is for the eye. */}
      <div className={`usage-bar${pct >= 90 ? " usage-high" : ""}`} aria-hidden="true">
        <span style={{ width: `${pct}%` }} />
      </div>
    </div>
  );
}
