export function UsageBar({
  label,
  used,
  total,
  unit,
}: {
  label: string;
  used: number;
  total: number;
  unit: string;
}) {
  const pct = total > 0 ? Math.min(100, Math.round((used / total) * 100)) : 0;
  return (
    <div className="usage">
      <div className="usage-text">
        <span>{label}</span>
        <span className="muted">
          {used} / {total} {unit}
        </span>
      </div>
      {/* The numbers above say it; the bar is for the eye. */}
      <div className={`usage-bar${pct >= 90 ? " usage-high" : ""}`} aria-hidden="true">
        <span style={{ width: `${pct}%` }} />
      </div>
    </div>
  );
}
