import { EmptyState } from "../components/EmptyState.tsx";
import { Link } from "../lib/router.tsx";

export function NotFoundPage() {
  return (
    <EmptyState title="Page not found">
      <p>There is nothing at this address.</p>
      <Link to="/">Go to your boxes</Link>
    </EmptyState>
  );
}
