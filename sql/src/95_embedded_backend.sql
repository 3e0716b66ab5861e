------------------------------------------------------------------------------
-- The embedded default: the daemon the extension supervises, as "local".
------------------------------------------------------------------------------
INSERT INTO mesh.backends (name, driver, enabled, catalog_order, config, max_size)
SELECT 'local', 'sandboxd', true, 0, '{"embedded": true}', 'xlarge'
 WHERE coalesce(current_setting('mesh.embedded_sandboxd', true), 'on') = 'on';
