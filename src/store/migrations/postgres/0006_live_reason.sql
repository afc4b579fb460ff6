-- Why a call of a resumed generation ran live instead of replaying (`rerun` when its
-- recorded answer was set aside on request); NULL for a first generation's calls and for
-- replayed ones.
ALTER TABLE calls ADD COLUMN live_reason TEXT;
