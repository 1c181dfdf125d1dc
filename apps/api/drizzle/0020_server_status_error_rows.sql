-- The failed-play server status is named `error`, as the deployment spec says; it was `broken`.
UPDATE "servers" SET "status" = 'error' WHERE "status" = 'broken';
