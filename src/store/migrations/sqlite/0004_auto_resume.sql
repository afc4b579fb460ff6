-- A run's automatic resume at a usage reset: when it is due (Unix milliseconds, NULL when
-- nothing is scheduled) and how many automatic resumes came since the owner's last resume.
ALTER TABLE runs ADD COLUMN resume_due_at INTEGER;
ALTER TABLE runs ADD COLUMN auto_resumes INTEGER NOT NULL DEFAULT 0;
CREATE INDEX runs_resume_due_at ON runs (resume_due_at) WHERE resume_due_at IS NOT NULL;
