-- Version 2: find the runs that recorded a script file (the MCP `file://` script resource
-- serves only files some run recorded).
CREATE INDEX runs_by_script_file ON runs (script_file);
